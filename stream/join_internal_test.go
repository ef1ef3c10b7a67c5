package stream

import (
	"testing"
	"time"

	"github.com/weirstream/weir/state"
)

// A task restored on a worker whose clock runs behind the previous
// owner's seeds its join sequence inside the numbers the previous owner
// buffered records under. Every record stays buffered: none is overwritten
// by a later one with the same event time.
func TestJoinSequenceSurvivesAClockBehind(t *testing.T) {
	b := state.OpenMemory(state.MemoryOptions{})
	var scope state.KeyScope
	scope.Set([]byte("key-1"))
	m, err := state.NewMap(state.Backend(b), &scope, "left", state.Codec[seqKey](seqKeyCodec{}), state.String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { seqClock = time.Now }()
	const ts = 1_700_000_000_000
	owner := time.Now()
	for i, clock := range []time.Time{owner, owner.Add(-time.Nanosecond), owner.Add(-5 * time.Minute)} {
		seqClock = func() time.Time { return clock }
		seq := newSequence()
		for j := range 3 {
			if err := putNew(m, seq, ts, string(rune('a'+3*i+j))); err != nil {
				t.Fatal(err)
			}
		}
	}
	var got []string
	if err := m.Range(func(k seqKey, v string) error {
		if k.TS != ts {
			t.Errorf("key %+v: event time changed", k)
		}
		got = append(got, v)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 9 {
		t.Fatalf("buffered %q, want all 9 records of three owners", got)
	}
}
