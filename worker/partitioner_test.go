package worker

import (
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/internal/marker"
	"github.com/weirstream/weir/internal/partition"
)

// TestRepartitioner: a repartition topic's records go where the input's
// partitioner puts their keys, and its watermark markers into the
// partition each names; with murmur2, exactly where the sink's own
// partitioner for such a topic (marker.Partitioner) puts them.
func TestRepartitioner(t *testing.T) {
	const n = 7
	sinks := marker.Partitioner().ForTopic("t")
	for _, p := range partition.All {
		t.Run(p.String(), func(t *testing.T) {
			rp := repartitioner(p).ForTopic("t")
			for i := range 500 {
				key := []byte("w" + strconv.Itoa(i))
				if got, want := rp.Partition(&kgo.Record{Key: key}, n), p.Partition(key, n); got != want {
					t.Fatalf("key %q: partition %d, want %d", key, got, want)
				}
				if p == partition.Murmur2 {
					if got, want := rp.Partition(&kgo.Record{Key: key}, n), sinks.Partition(&kgo.Record{Key: key}, n); got != want {
						t.Fatalf("key %q: partition %d, the sink's own %d", key, got, want)
					}
				}
			}
			for part := range int32(n) {
				m := marker.Record("t", part, marker.Mark{Task: 1, Tasks: n, Millis: 5})
				if got := rp.Partition(m, n); got != int(part) {
					t.Errorf("marker for partition %d went to %d", part, got)
				}
			}
			if got, want := rp.Partition(&kgo.Record{}, n), p.Partition(nil, n); got != want {
				t.Errorf("a nil key: partition %d, want %d (hashed as empty)", got, want)
			}
		})
	}
}
