package engine_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/stream"
)

// withoutPrefetch hides the memory backend's Prefetcher, so that a keyed
// operator takes the record-at-a-time path.
func withoutPrefetch(f state.Factory) state.Factory {
	return func(task int, operator, dir string) (state.Backend, error) {
		b, err := f(task, operator, dir)
		return struct{ state.Backend }{b}, err
	}
}

// TestKeyedBatchPaths runs a keyed operator over batches, with a backend that
// prefetches and one that does not: each call sees its own record's key,
// position and state, and a panic in the key function or in Process names
// the record.
func TestKeyedBatchPaths(t *testing.T) {
	const records, keys = 5000, 97
	backends := map[string]state.Factory{
		"prefetch": state.NewMemory(state.MemoryOptions{}),
		"plain":    withoutPrefetch(state.NewMemory(state.MemoryOptions{})),
	}
	for name, backend := range backends {
		for _, panicIn := range []string{"", "key", "process"} {
			t.Run(fmt.Sprintf("%s/panic=%s", name, panicIn), func(t *testing.T) {
				job := stream.NewJob("batches")
				src := stream.Source(job, "numbers", stream.GeneratorSource(records, func(_ int, i int64) int64 { return i }))
				keyed := stream.KeyByPartitioned(src, "by-key", func(n int64) uint64 {
					if panicIn == "key" && n == 4242 {
						panic("key boom")
					}
					return uint64(n) % keys
				}, state.Uint64())
				counts := stream.Process(keyed, "count", func(s *stream.Setup) (stream.Processor[uint64, int64, int64], error) {
					count, err := stream.ValueState(s, "count", state.Int64())
					return stream.Processor[uint64, int64, int64]{
						Process: func(ctx *stream.Context[uint64, int64], n int64) error {
							if panicIn == "process" && n == 4242 {
								panic("process boom")
							}
							if ctx.Key() != uint64(n)%keys || ctx.Position().Offset != n {
								return fmt.Errorf("record %d sees key %d at offset %d", n, ctx.Key(), ctx.Position().Offset)
							}
							c, _, err := count.Get()
							if err != nil {
								return err
							}
							// Keys come round in order: this is the key's
							// n/keys-th record.
							if c != n/keys {
								return fmt.Errorf("record %d: count %d, want %d", n, c, n/keys)
							}
							return count.Set(c + 1)
						},
					}, err
				})
				stream.Sink(counts, "out", stream.DiscardSink[int64]())
				plan, err := job.Build()
				if err != nil {
					t.Fatal(err)
				}
				err = engine.Run(t.Context(), plan, engine.Config{
					Tasks:          []int{0},
					Storage:        checkpoint.NewMemory(checkpoint.MemoryOptions{}),
					StateDir:       t.TempDir(),
					StateBackend:   backend,
					RestartBackoff: time.Millisecond,
					MaxRestarts:    1,
				})
				if panicIn == "" {
					if err != nil {
						t.Fatal(err)
					}
					return
				}
				var re *engine.RecordError
				if !errors.As(err, &re) || !errors.Is(err, engine.ErrPanic) {
					t.Fatalf("want a RecordError of a panic, got %v", err)
				}
				if re.Operator != "count" || re.Position.Offset != 4242 || !strings.Contains(err.Error(), panicIn+" boom") {
					t.Fatalf("error does not name the operator and the record: %v", err)
				}
			})
		}
	}
}
