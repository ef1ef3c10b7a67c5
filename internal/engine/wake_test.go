package engine_test

import (
	"context"

	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/stream"
)

// slowPollReader is an idle source whose Poll waits pollWait for records
// that never come, unless Wake ends the wait (if wakeable).
type slowPollReader struct {
	wait     time.Duration
	wakeable bool
	woken    chan struct{}
}

func (r *slowPollReader) Poll(ctx context.Context, _ *engine.Batch[int64]) error {
	t := time.NewTimer(r.wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	case <-r.woken:
	}
	return nil
}

func (r *slowPollReader) Positions() []checkpoint.SourcePosition {
	return []checkpoint.SourcePosition{{Source: "in", Partition: 0, Offset: 0}}
}

func (r *slowPollReader) Close() error { return nil }

// wakingReader is a slowPollReader that is an engine.Waker.
type wakingReader struct{ *slowPollReader }

func (r wakingReader) Wake() {
	select {
	case r.woken <- struct{}{}:
	default:
	}
}

type completions struct {
	engine.NopObserver
	n atomic.Int64
}

func (c *completions) CheckpointCompleted(string, int, checkpoint.Manifest) { c.n.Add(1) }

// TestWakeEndsThePollThatHoldsACheckpoint: a barrier (and a completion's
// commit) waits for the source's Poll to return; a reader that is an
// engine.Waker is woken when they arrive, so checkpoints every 20 ms
// complete every 20 ms or so, not once per Poll's wait (here 2 s).
func TestWakeEndsThePollThatHoldsACheckpoint(t *testing.T) {
	for _, wakeable := range []bool{false, true} {
		job := stream.NewJob("wake")
		src := stream.Source(job, "in", func(context.Context, engine.TaskInfo, []checkpoint.SourcePosition) (engine.SourceReader[int64], error) {
			r := &slowPollReader{wait: 2 * time.Second, woken: make(chan struct{}, 1)}
			if wakeable {
				return wakingReader{r}, nil
			}
			return r, nil
		})
		stream.Sink(src, "out", stream.DiscardSink[int64]())
		plan, err := job.Build()
		if err != nil {
			t.Fatal(err)
		}
		obs := &completions{}
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(1500*time.Millisecond, cancel)
		cfg := engine.Config{Tasks: []int{0}, Storage: checkpoint.NewMemory(checkpoint.MemoryOptions{}), StateDir: t.TempDir(),
			Checkpoint: checkpoint.Config{Interval: 20 * time.Millisecond}, Observer: obs}
		if err := engine.Run(ctx, plan, cfg); err != nil {
			t.Fatal(err)
		}
		cancel()
		n := obs.n.Load()
		switch {
		case wakeable && n < 10:
			t.Errorf("a woken source: %d checkpoints completed in 1.5 s at 20 ms, want 10 or more", n)
		case !wakeable && n > 2:
			t.Errorf("a source that is no Waker: %d checkpoints completed in 1.5 s; each should wait out a 2 s poll (is the test still measuring the wait?)", n)
		}
	}
}
