package worker

import (
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/cli"
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

// TestCheckPartitioner: a job's first start records its partitioner; a
// start with another is refused, naming --partitioner and the recorded
// one; a job with checkpoints of before the record gets it with a warning.
func TestCheckPartitioner(t *testing.T) {
	ctx := t.Context()
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	st := checkpoint.NewMemory(checkpoint.MemoryOptions{})
	for _, name := range []string{"murmur2", "murmur2"} {
		if err := checkPartitioner(ctx, st, "job", name, log); err != nil {
			t.Fatal(err)
		}
	}
	err := checkPartitioner(ctx, st, "job", "fnv1a", log)
	var ue cli.UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--partitioner fnv1a: job job's state was keyed with murmur2") ||
		!strings.Contains(err.Error(), "run it with --partitioner murmur2") {
		t.Fatalf("another partitioner: %v; want a usage error naming both", err)
	}
	if strings.Contains(logs.String(), "no record") {
		t.Errorf("warned on a new job: %s", logs.String())
	}

	if err := st.PutIfAbsent(ctx, checkpoint.ManifestName("old", 0, 3), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if err := checkPartitioner(ctx, st, "old", "crc32", log); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "no record of its partitioner") {
		t.Error("no warning that the partitioner was recorded late")
	}
	if err := checkPartitioner(ctx, st, "old", "murmur2", log); err == nil {
		t.Error("the late record is not kept to")
	}
}
