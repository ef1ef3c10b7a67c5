package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/weirstream/weir/checkpoint"
)

// Run runs the tasks cfg names until every one has finished its input (and
// taken a final checkpoint), ctx is cancelled (then it returns nil), or a
// task failed more often in a row than cfg.MaxRestarts allows.
//
// A failed task restarts from its latest checkpoint after an exponential
// backoff; a task that completed a checkpoint since its last failure starts
// the backoff over.
func Run(ctx context.Context, plan *Plan, cfg Config) error {
	if err := cfg.Validate(plan.Name()); err != nil {
		return fmt.Errorf("job %s: invalid configuration: %w", plan.Name(), err)
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, id := range cfg.Tasks {
		g.Go(func() error { return superviseTask(gctx, plan, &cfg, id) })
	}
	err := g.Wait()
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

func superviseTask(ctx context.Context, plan *Plan, cfg *Config, id int) error {
	backoff := cfg.RestartBackoff
	failures := 0
	unusable := map[checkpoint.ID]error{}
	for {
		t := newTask(plan, cfg, id, unusable)
		err := t.run(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err == nil {
			return nil
		}
		// A checkpoint whose state cannot be read back is not retried: the
		// next attempt walks back past it, at once.
		var bad *unusableStateError
		if errors.As(err, &bad) && unusable[bad.checkpoint] == nil {
			unusable[bad.checkpoint] = bad
			t.log.Error("cannot restore the state of checkpoint, falling back to the previous one", "checkpoint", bad.checkpoint, "err", err)
			cfg.Observer.TaskFailed(plan.Name(), id, err, true)
			continue
		}
		t.mu.Lock()
		progressed := t.completed
		t.mu.Unlock()
		if progressed {
			failures, backoff = 0, cfg.RestartBackoff
		}
		failures++
		restarting := (cfg.MaxRestarts < 0 || failures <= cfg.MaxRestarts) && !errors.Is(err, ErrSuperseded)
		cfg.Observer.TaskFailed(plan.Name(), id, err, restarting)
		if errors.Is(err, ErrSuperseded) {
			return fmt.Errorf("task %d: %w", id, err)
		}
		if !restarting {
			return fmt.Errorf("task %d failed %d times in a row, giving up: %w", id, failures, err)
		}
		t.log.Warn("task failed, restarting", "err", err, "attempt", failures, "backoff", backoff)
		timer := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-cfg.Drain:
			// Draining while the task is down after a failure: there is no
			// final checkpoint to take, and the failure must not pass for
			// a clean stop.
			timer.Stop()
			return fmt.Errorf("task %d failed while draining: %w", id, err)
		case <-timer.C:
		}
		backoff = min(2*backoff, cfg.MaxRestartBackoff)
	}
}
