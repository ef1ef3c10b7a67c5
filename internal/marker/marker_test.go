package marker

import (
	"math"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestRoundTrip(t *testing.T) {
	for _, m := range []Mark{
		{Task: 0, Tasks: 1, Millis: math.MinInt64},
		{Task: 3, Tasks: 4, Millis: 1_700_000_000_000, Idle: true},
		{Task: 299, Tasks: 300, Millis: math.MaxInt64},
		{Task: 1, Tasks: 2, Millis: -1},
	} {
		r := Record("t", 7, m)
		if !Is(r) || r.Partition != 7 || r.Topic != "t" || r.Key != nil {
			t.Fatalf("record of %+v: %+v", m, r)
		}
		got, err := Decode(r.Value)
		if err != nil || got != m {
			t.Fatalf("decode %+v: %+v, %v", m, got, err)
		}
	}
	if Is(&kgo.Record{Value: Record("t", 0, Mark{Tasks: 1}).Value}) {
		t.Error("a record without the header is a marker")
	}
}

// TestDecodeRejects: a corrupt marker is an error, never a panic or a
// made-up watermark.
func TestDecodeRejects(t *testing.T) {
	good := Record("t", 0, Mark{Task: 1, Tasks: 2, Millis: 5}).Value
	for name, v := range map[string][]byte{
		"empty":        nil,
		"version":      append([]byte{2}, good[1:]...),
		"truncated":    good[:len(good)-1],
		"longer":       append(append([]byte(nil), good...), 0),
		"idle byte":    append(append([]byte(nil), good[:len(good)-1]...), 2),
		"task too big": Record("t", 0, Mark{Task: 2, Tasks: 2}).Value,
		"no tasks":     Record("t", 0, Mark{Task: 0, Tasks: 0}).Value,
		"bad varint":   {1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
	} {
		if m, err := Decode(v); err == nil {
			t.Errorf("%s: decoded %+v", name, m)
		}
	}
}

// TestPartitioner: markers go where they say, keyed records where Kafka's
// default partitioner puts them, a nil key as an empty one.
func TestPartitioner(t *testing.T) {
	p := Partitioner().ForTopic("t")
	def := kgo.StickyKeyPartitioner(nil).ForTopic("t")
	for part := range int32(5) {
		if got := p.Partition(Record("t", part, Mark{Tasks: 5}), 5); got != int(part) {
			t.Errorf("marker for partition %d went to %d", part, got)
		}
	}
	for _, k := range []string{"a", "word", "12345", ""} {
		r := &kgo.Record{Key: []byte(k)}
		if got, want := p.Partition(r, 5), def.Partition(&kgo.Record{Key: []byte(k)}, 5); got != want {
			t.Errorf("key %q: partition %d, Kafka's %d", k, got, want)
		}
	}
	if got, want := p.Partition(&kgo.Record{}, 5), def.Partition(&kgo.Record{Key: []byte{}}, 5); got != want {
		t.Errorf("nil key: partition %d, the empty key's %d", got, want)
	}
	if !p.RequiresConsistency(&kgo.Record{}) {
		t.Error("not consistent")
	}
}
