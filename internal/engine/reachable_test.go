package engine_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
)

// A task that failed while what it needs was unreachable restarts as soon
// as a probe answers again, not when a backoff grown during the fault ends;
// a task whose probes always answer (the fault was its own) waits its
// backoff out. Both then finish with every record once.
func TestRestartWhenReachableAgain(t *testing.T) {
	const backoff = 20 * time.Second
	for _, tc := range []struct {
		name      string
		downFor   int32 // probes that fail after the task failed
		wantEarly bool
	}{
		{"fault cleared", 3, true},
		{"reachable throughout", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var failed atomic.Bool
			failedAt := make(chan time.Time, 1)
			fail := func(n int64) error {
				if n == 500 && failed.CompareAndSwap(false, true) {
					failedAt <- time.Now()
					return errors.New("injected: broker unreachable")
				}
				return nil
			}
			var probes atomic.Int32
			reachable := func(context.Context) error {
				if probes.Add(1) <= tc.downFor {
					return errors.New("injected: no answer")
				}
				return nil
			}
			store := newTxnStore[update]()
			plan := countJob(t, 2000, 10, 1, fail, store.sink())
			ctx, cancel := context.WithTimeout(t.Context(), 3*backoff)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				done <- engine.Run(ctx, plan, engine.Config{
					Tasks:          []int{0},
					Storage:        checkpoint.NewMemory(checkpoint.MemoryOptions{}),
					Checkpoint:     checkpoint.Config{Interval: 10 * time.Millisecond},
					StateDir:       t.TempDir(),
					RestartBackoff: backoff,
					Reachable:      reachable,
					ProbeInterval:  20 * time.Millisecond,
				})
			}()
			at := <-failedAt
			if tc.wantEarly {
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				if took := time.Since(at); took >= backoff/2 {
					t.Fatalf("restarted %v after the failure, want well within the %v backoff once the probe answered", took, backoff)
				}
				if n := probes.Load(); n != tc.downFor+1 {
					t.Fatalf("%d probes, want %d failed and one that answered", n, tc.downFor)
				}
				checkExactlyOnce(t, store.visible(), 2000, 10, 1)
				return
			}
			select {
			case err := <-done:
				t.Fatalf("the job ended %v after its failure, inside the %v backoff: %v", time.Since(at), backoff, err)
			case <-time.After(2 * time.Second):
			}
			if n := probes.Load(); n < 2 {
				t.Fatalf("%d probes in 2 s of backoff, want one every 20 ms", n)
			}
			cancel() // the rest of the backoff would only be waited out
			<-done
		})
	}
}

// A task that fails for a cause of its own, while the probe comes and goes,
// still gives up: an all-clear starts the count of failures over only
// Config.MaxRestarts times without a completed checkpoint.
func TestFlappingProbeDoesNotRestartForever(t *testing.T) {
	var runs atomic.Int32
	fail := func(n int64) error {
		if n == 0 {
			runs.Add(1)
		}
		return errors.New("injected: a bug in the job")
	}
	var probes atomic.Int32
	reachable := func(context.Context) error {
		if probes.Add(1)%2 == 1 {
			return errors.New("injected: no answer")
		}
		return nil
	}
	store := newTxnStore[update]()
	plan := countJob(t, 2000, 10, 1, fail, store.sink())
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err := engine.Run(ctx, plan, engine.Config{
		Tasks:          []int{0},
		Storage:        checkpoint.NewMemory(checkpoint.MemoryOptions{}),
		Checkpoint:     checkpoint.Config{Interval: time.Hour},
		StateDir:       t.TempDir(),
		RestartBackoff: 20 * time.Second, // only an all-clear restarts within the test
		MaxRestarts:    3,
		Reachable:      reachable,
		ProbeInterval:  5 * time.Millisecond,
	})
	if ctx.Err() != nil {
		t.Fatalf("still restarting after 30 s (%d runs, %d probes): an all-clear started the count over every time", runs.Load(), probes.Load())
	}
	if err == nil || !strings.Contains(err.Error(), "giving up") {
		t.Fatalf("Run = %v, want the task to give up", err)
	}
	// 3 all-clears start the count over; then 4 failures in a row end it.
	if n := runs.Load(); n < 4 || n > 8 {
		t.Fatalf("%d runs, want 3 started over and 4 in a row, 7", n)
	}
}
