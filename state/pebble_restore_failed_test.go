package state

import (
	"context"
	"slices"
	"testing"

	"github.com/weirstream/weir/checkpoint"
)

// A restore that fails leaves the state as it was, the writes made while
// a base snapshot's cut ran included: they sit in the write window's
// batch, not yet in the DB, and a restore that discarded the window before
// it could fail lost them (a list's append, and value-cache entries
// written out into the window when the cache overflowed, which the next
// base snapshot then lacked).
func TestPebbleFailedRestoreKeepsWindowWrites(t *testing.T) {
	// fails is a restore that fails after the checks it makes first.
	fails := func(t *testing.T, p *Pebble) {
		t.Helper()
		if err := p.Restore(context.Background(), newFakeStorage(), checkpoint.StateHandle{Backend: "memory"}); err == nil {
			t.Fatal("a memory handle restored into the pebble backend")
		}
	}
	// cutHeld takes snapshot 1 with its cut held, so that the writes that
	// follow go to the window, and returns the cut's release.
	cutHeld := func(t *testing.T, p *Pebble) func() {
		t.Helper()
		gate := make(chan struct{})
		p.cutHook = func() { <-gate }
		s, err := p.Snapshot(1)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Release)
		if p.window == nil {
			t.Fatal("no write window while the cut runs: the test tests nothing")
		}
		return func() { close(gate) }
	}

	t.Run("list", func(t *testing.T) {
		p := openTestPebble(t, PebbleOptions{})
		l := mustList(t, p, "l")
		release := cutHeld(t, p)
		if err := l.Append([]byte("k"), []byte("x")); err != nil {
			t.Fatal(err)
		}
		release()
		fails(t, p)
		var got []string
		if err := l.Iterate([]byte("k"), func(b []byte) error { got = append(got, string(b)); return nil }); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, []string{"x"}) {
			t.Errorf("after a failed restore the list holds %q, want [x]", got)
		}
	})

	t.Run("values written out", func(t *testing.T) {
		p := openTestPebble(t, PebbleOptions{valueCache: 300})
		v := mustValue(t, p, "v")
		release := cutHeld(t, p)
		for i := range 20 { // past the cache's 300 bytes: written out into the window
			if err := v.Put(k(i), []byte("value")); err != nil {
				t.Fatal(err)
			}
		}
		release()
		fails(t, p)
		st := newFakeStorage()
		q := restoreFresh(t, st, checkpointNow(t, p, st, 2), PebbleOptions{})
		if got := readAll(t, q, 20); len(got) != 20 {
			t.Errorf("checkpoint 2, after a failed restore, holds %d of the 20 values written", len(got))
		}
	})
}
