package engine_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/stream"
)

// TestProcessingTimeTimers: every record registers a timer for its key at
// the (frozen) processing time, so it is due at once. Timers registered
// twice for the same key and time fire once, with the key in scope.
func TestProcessingTimeTimers(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	job := stream.NewJob("timers")
	src := stream.Source(job, "numbers", stream.GeneratorSource(100, func(_ int, i int64) int64 { return i }))
	keyed := stream.KeyByPartitioned(src, "by-key", func(n int64) int64 { return n % 10 }, state.Int64())
	fired := stream.Process(keyed, "timers", func(s *stream.Setup) (stream.Processor[int64, int64, string], error) {
		return stream.Processor[int64, int64, string]{
			Process: func(ctx *stream.Context[int64, string], n int64) error {
				return ctx.RegisterTimer(ctx.Now())
			},
			OnTimer: func(ctx *stream.Context[int64, string], ts time.Time) error {
				return ctx.Emit(fmt.Sprintf("key %d at %s", ctx.Key(), ts.Format(time.TimeOnly)))
			},
		}, nil
	})
	store := newTxnStore[string]()
	stream.Sink(fired, "out", store.sink())
	plan, err := job.Build()
	if err != nil {
		t.Fatal(err)
	}
	err = engine.Run(t.Context(), plan, engine.Config{
		Tasks:    []int{0},
		Storage:  checkpoint.NewMemory(checkpoint.MemoryOptions{}),
		StateDir: t.TempDir(),
		Now:      func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	got := store.visible()
	slices.Sort(got)
	var want []string
	for k := range 10 {
		want = append(want, fmt.Sprintf("key %d at 12:00:00", k))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("timers fired:\n%v\nwant:\n%v", got, want)
	}
}
