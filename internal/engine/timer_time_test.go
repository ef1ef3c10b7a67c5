package engine_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/stream"
)

// checkpointed tells when a completed checkpoint's source position reached
// an offset.
type checkpointed struct {
	engine.NopObserver
	offset atomic.Int64
}

func (o *checkpointed) CheckpointCompleted(_ string, _ int, m checkpoint.Manifest) {
	for _, a := range m.Operators {
		for _, p := range a.Sources {
			o.offset.Store(max(o.offset.Load(), p.Offset))
		}
	}
}

// TestProcessingTimerOutputAfterRestore: what a processing-time timer
// emits carries the event time of the record the task processed last.
// Restored, before any record, a due timer's output carried 0 (1970),
// late for every event-time window downstream; it now carries the
// operator's event time, its restored watermark and 1 ms.
func TestProcessingTimerOutputAfterRestore(t *testing.T) {
	recs := []wEvent{at(0), at(5)}
	clock := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	out := newTxnStore[int64]()
	job := stream.NewJob("reminders")
	src := stream.SourceWithWatermarks(job, "events", func(_ context.Context, _ engine.TaskInfo, restored []checkpoint.SourcePosition) (engine.SourceReader[wEvent], error) {
		r := &oneByOne{recs: recs, endless: true}
		for _, p := range restored {
			r.next = p.Offset
		}
		return r, nil
	}, stream.Watermarks[wEvent]{Timestamp: func(e wEvent, _ stream.Position) time.Time { return time.UnixMilli(e.TS) }})
	reminders := stream.Process(stream.KeyByPartitioned(src, "by-key", func(e wEvent) uint64 { return e.Key }, state.Uint64()), "remind",
		func(*stream.Setup) (stream.Processor[uint64, wEvent, int64], error) {
			return stream.Processor[uint64, wEvent, int64]{
				Process: func(ctx *stream.Context[uint64, int64], _ wEvent) error {
					return ctx.RegisterTimer(ctx.Now().Add(time.Hour))
				},
				// The event time the reminder carries.
				OnTimer: func(ctx *stream.Context[uint64, int64], _ time.Time) error {
					return ctx.Emit(ctx.Timestamp().UnixMilli())
				},
			}, nil
		})
	stream.Sink(reminders, "out", out.sink())
	plan, err := job.Build()
	if err != nil {
		t.Fatal(err)
	}
	storage := checkpoint.NewMemory(checkpoint.MemoryOptions{})
	run := func(now time.Time, done func(*checkpointed) bool) {
		t.Helper()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		obs := &checkpointed{}
		errc := make(chan error, 1)
		go func() {
			errc <- engine.Run(ctx, plan, engine.Config{Tasks: []int{0}, Storage: storage, StateDir: t.TempDir(), Observer: obs,
				Checkpoint: checkpoint.Config{Interval: 5 * time.Millisecond}, Now: func() time.Time { return now }})
		}()
		deadline := time.After(30 * time.Second)
		for !done(obs) {
			select {
			case err := <-errc:
				t.Fatalf("the run ended: %v", err)
			case <-deadline:
				t.Fatal("timed out")
			case <-time.After(5 * time.Millisecond):
			}
		}
		cancel()
		<-errc
	}
	// Both records in a completed checkpoint, their timers an hour off.
	run(clock, func(o *checkpointed) bool { return o.offset.Load() == 2 })
	if got := out.visible(); len(got) != 0 {
		t.Fatalf("reminders before their time: %v", got)
	}
	// Two hours on, the restored timer is due at once.
	run(clock.Add(2*time.Hour), func(*checkpointed) bool { return len(out.visible()) > 0 })
	// The watermark after at(5), no out-of-orderness, is wBase+4.
	if got := out.visible(); got[0] != wBase+5 {
		t.Fatalf("the restored timer's output carries event time %d (%v), want the operator's watermark and 1 ms, %d",
			got[0], time.UnixMilli(got[0]).UTC(), wBase+5)
	}
}
