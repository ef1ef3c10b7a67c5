package engine_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
)

// holdingErr is a sink's failure that holds its task (engine.Holding).
type holdingErr struct{ name string }

func (e holdingErr) Error() string    { return "the output lost track of " + e.name }
func (e holdingErr) HoldName() string { return e.name }

// closeFails is a writer whose Close fails with err.
type closeFails[T any] struct {
	engine.SinkWriter[T]
	err error
}

func (w closeFails[T]) Close() error {
	if err := w.SinkWriter.Close(); err != nil {
		return err
	}
	return w.err
}

// heldLog counts the failures of a task that were a *engine.HeldError,
// and closes heldTimes once there were five.
type heldLog struct {
	engine.NopObserver
	mu            sync.Mutex
	held, restore int
	heldTimes     chan struct{}
}

func newHeldLog() *heldLog { return &heldLog{heldTimes: make(chan struct{})} }

func (l *heldLog) TaskFailed(_ string, _ int, err error, _ bool) {
	var h *engine.HeldError
	if errors.As(err, &h) {
		l.mu.Lock()
		if l.held++; l.held == 5 {
			close(l.heldTimes)
		}
		l.mu.Unlock()
	}
}

func (l *heldLog) TaskRestored(string, int, int64, checkpoint.ID, time.Duration) {
	l.mu.Lock()
	l.restore++
	l.mu.Unlock()
}

func (l *heldLog) counts() (held, restored int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held, l.restore
}

// TestHoldStopsTheTaskUntilReleased: a sink's Holding failure, on open or
// on close, leaves a hold in checkpoint storage; every start of the task
// then fails with a *HeldError naming it and the release command, even
// once the sink would open again, and the task sinks nothing; released,
// the task runs to its end and its output is whole.
func TestHoldStopsTheTaskUntilReleased(t *testing.T) {
	const records = 300
	for _, at := range []string{"open", "close"} {
		t.Run(at, func(t *testing.T) {
			ctx := t.Context()
			st := checkpoint.NewMemory(checkpoint.MemoryOptions{})
			store := newTxnStore[update]()
			var failing atomic.Bool
			failing.Store(true)
			base := store.sink()
			sink := store.sinkWith(func(ctx context.Context, info engine.TaskInfo, restored []checkpoint.Committable) (engine.SinkWriter[update], error) {
				fail := failing.Swap(false)
				if fail && at == "open" {
					return nil, holdingErr{"lost-1"}
				}
				w, err := base.Open(ctx, info, restored)
				if err != nil || !fail {
					return w, err
				}
				return closeFails[update]{w, holdingErr{"lost-1"}}, nil
			})
			plan := countJob(t, records, 10, 1, nil, sink)
			obs := newHeldLog()
			cfg := engine.Config{Storage: st, StateDir: t.TempDir(), Tasks: []int{0}, Observer: obs,
				RestartBackoff: 5 * time.Millisecond, MaxRestartBackoff: 20 * time.Millisecond, MaxRestarts: -1}
			cfg.Checkpoint.Interval = 20 * time.Millisecond

			if at == "close" {
				// The first run ends its input and closes: the failure
				// comes then, after the output committed.
				first := cfg
				first.MaxRestarts = 1 // the held restart, then give up
				first.Observer = newHeldLog()
				err := engine.Run(ctx, plan, first)
				if err == nil || !strings.Contains(err.Error(), "held until an operator releases it") {
					t.Fatalf("Run: %v; want the close's failure, saying the task is held", err)
				}
				if n := len(store.visible()); n != records {
					t.Fatalf("first run committed %d results, want %d", n, records)
				}
			}
			var runErr error
			finished := make(chan struct{})
			rctx, cancel := context.WithCancel(ctx)
			go func() {
				defer close(finished)
				runErr = engine.Run(rctx, plan, cfg)
			}()
			defer func() { cancel(); <-finished }()
			select {
			case <-obs.heldTimes:
			case <-finished:
				t.Fatalf("Run ended before the task failed held five times: %v", runErr)
			case <-time.After(20 * time.Second):
				held, _ := obs.counts()
				t.Fatalf("the task failed held %d times in 20 s, want 5", held)
			}
			holds, err := checkpoint.Holds(ctx, st, "count", 0)
			if err != nil || len(holds) != 1 || holds[0].Name != "lost-1" || !strings.Contains(holds[0].Reason, "lost track of lost-1") || holds[0].Time.IsZero() {
				t.Fatalf("holds: %+v, %v; want one, lost-1, with the failure as its reason", holds, err)
			}
			if _, restored := obs.counts(); restored != 0 {
				t.Fatalf("a held task restored %d times: it opened its sinks", restored)
			}
			want := 0
			if at == "close" {
				want = records
			}
			if n := len(store.visible()); n != want {
				t.Fatalf("held, the output has %d results, want %d", n, want)
			}
			if err := checkpoint.ReleaseHold(ctx, st, "count", 0, "lost-1"); err != nil {
				t.Fatal(err)
			}
			select {
			case <-finished:
				if runErr != nil {
					t.Fatalf("released, Run: %v", runErr)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("released, the task did not run to its end in 30 s")
			}
			if n := len(store.visible()); n != records {
				t.Fatalf("released, the output has %d results, want %d", n, records)
			}
			if err := checkpoint.ReleaseHold(ctx, st, "count", 0, "lost-1"); !errors.Is(err, checkpoint.ErrNotFound) {
				t.Fatalf("releasing a released hold: %v, want ErrNotFound", err)
			}
		})
	}
}
