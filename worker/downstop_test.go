package worker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/examples/count"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/worker/internal/status"
)

// failedObserver tells when a task failed and will restart.
type failedObserver struct {
	engine.NopObserver
	failed chan struct{}
}

func (o *failedObserver) TaskFailed(_ string, _ int, _ error, restarting bool) {
	if restarting {
		select {
		case o.failed <- struct{}{}:
		default:
		}
	}
}

// TestTaskDownWhenRevoked: a task the group takes away while it is down
// after a failure (between restarts, a full disk, say) ends without a
// final checkpoint; its next owner restores its last valid one. That must
// not end the worker and its healthy tasks, as it did (found by processor
// chaos: a worker exited while one of its tasks was failing on a full
// disk). A drain of the whole worker still reports it.
func TestTaskDownWhenRevoked(t *testing.T) {
	for _, drain := range []bool{false, true} {
		job := stream.NewJob("count")
		failing := func(context.Context, engine.TaskInfo, []checkpoint.SourcePosition) (engine.SourceReader[count.In], error) {
			return nil, errors.New("open: no space left on device")
		}
		stream.Sink(count.Counts(stream.Source(job, count.SourceName, failing)), count.SinkName, stream.DiscardSink[count.Out]())
		plan, err := job.Build()
		if err != nil {
			t.Fatal(err)
		}
		obs := &failedObserver{failed: make(chan struct{}, 1)}
		ctx, cancel := context.WithCancel(t.Context())
		w := &worker{log: newLogger(nopWriter{}, "info"), started: time.Now(), tasks: map[int]*status.Task{}, cancelRun: cancel}
		if drain {
			w.group = &member{w: w}
			w.group.draining.Store(true)
		}
		w.runner, err = engine.NewRunner(ctx, plan, engine.Config{Storage: checkpoint.NewMemory(checkpoint.MemoryOptions{}),
			StateDir: t.TempDir(), Observer: obs, RestartBackoff: time.Hour, MaxRestartBackoff: time.Hour}, w.taskEnded)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.runner.Start(0, 1); err != nil {
			t.Fatal(err)
		}
		select {
		case <-obs.failed:
		case <-time.After(10 * time.Second):
			t.Fatal("the task did not fail")
		}
		res := w.runner.Stop(0, 5*time.Second)
		if !engine.DownWhenStopped(res.Err) {
			t.Fatalf("drain %v: stop: %v, want a task down when stopped", drain, res.Err)
		}
		w.runner.Wait()
		if err := w.fatalErr(); (err != nil) != drain {
			t.Errorf("drain %v: the worker's fatal error is %v", drain, err)
		}
		cancel()
	}
}
