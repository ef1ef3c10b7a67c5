package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/weirstream/weir/checkpoint"
)

// Run runs the tasks cfg names, all with the fencing epoch cfg.Epoch, until
// every one has finished its input (and taken a final checkpoint), ctx is
// cancelled (then it returns nil), cfg.Drain is closed and every task has
// drained, or a task failed more often in a row than cfg.MaxRestarts allows.
//
// A failed task restarts from its latest checkpoint after an exponential
// backoff; a task that completed a checkpoint since its last failure starts
// the backoff over, and so does one whose cfg.Reachable probe failed and
// then answered while it waited, which restarts at once.
func Run(ctx context.Context, plan *Plan, cfg Config) error {
	if len(cfg.Tasks) == 0 {
		err := errors.New("tasks: at least one task is required")
		return fmt.Errorf("job %s: invalid configuration: %w", plan.Name(), errors.Join(err, cfg.Validate(plan.Name())))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		once  sync.Once
		first error
	)
	r, err := NewRunner(ctx, plan, cfg, func(task int, err error) {
		if err != nil && err != context.Canceled { // a bare Canceled: stopped
			once.Do(func() { first = err; cancel() })
		}
	})
	if err != nil {
		return err
	}
	for _, id := range r.cfg.Tasks {
		if err := r.Start(id, r.cfg.Epoch); err != nil {
			// A task started before may have failed for good already,
			// cancelling the rest: its error is the one to report, not
			// that this one could not start. So is a cancelled ctx (nil).
			cancel()
			r.Wait()
			if first == nil && errors.Is(err, context.Canceled) {
				return nil
			}
			return cmp.Or(first, err)
		}
	}
	r.Wait()
	return first
}

// Runner runs tasks of one plan that come and go: a worker starts the tasks
// its group assigns it and stops those it gives up. Each task is supervised
// (restarted after a failure, see Run) until it finishes, is stopped, or
// fails for good; then onExit hears of it.
//
// Config.Tasks and Config.Epoch are not used: Start names both. Closing
// Config.Drain drains every running task (as Stop does, without a bound).
type Runner struct {
	plan   *Plan
	cfg    Config
	ctx    context.Context
	onExit func(task int, err error)

	mu    sync.Mutex
	tasks map[int]*handle
	wg    sync.WaitGroup
}

// handle is one running task of a Runner.
type handle struct {
	id      int
	epoch   int64
	cancel  context.CancelFunc
	drain   chan struct{} // closed to stop gracefully
	drainMu sync.Once
	done    chan struct{} // closed when the supervisor returned
	err     error         // the supervisor's result, set before done closes
}

func (h *handle) startDrain() { h.drainMu.Do(func() { close(h.drain) }) }

// NewRunner validates cfg and returns a Runner whose tasks live at most as
// long as ctx. onExit, if not nil, is called once per started task when it
// ends, before Stop or Abort of it return: err is nil when it finished or
// drained, context.Canceled itself (not wrapped) when it was stopped or ctx
// ended, else why it failed for good (ErrSuperseded when a newer owner has
// it).
func NewRunner(ctx context.Context, plan *Plan, cfg Config, onExit func(task int, err error)) (*Runner, error) {
	if err := cfg.Validate(plan.Name()); err != nil {
		return nil, fmt.Errorf("job %s: invalid configuration: %w", plan.Name(), err)
	}
	if onExit == nil {
		onExit = func(int, error) {}
	}
	r := &Runner{plan: plan, cfg: cfg, ctx: ctx, onExit: onExit, tasks: map[int]*handle{}}
	if cfg.Drain != nil {
		go func() { // ends with ctx or the drain
			select {
			case <-ctx.Done():
			case <-cfg.Drain:
				r.mu.Lock()
				for _, h := range r.tasks {
					h.startDrain()
				}
				r.mu.Unlock()
			}
		}()
	}
	return r, nil
}

// ErrTaskRunning is returned by Start for a task that runs already.
var ErrTaskRunning = errors.New("task is running already")

// Start starts task id as the owner with fencing epoch: it restores the
// task's latest valid checkpoint and runs it until it is stopped, ends, or
// fails for good.
func (r *Runner) Start(id int, epoch int64) error {
	if id < 0 {
		return fmt.Errorf("task %d: negative index", id)
	}
	if id > 0 && len(r.plan.g.oneTask) > 0 {
		return fmt.Errorf("task %d: operators %v move records between tasks, and this plan has no way to move them "+
			"(built without Kafka, as in a test): only task 0 can run, alone; run the job under a worker to run more", id, r.plan.g.oneTask)
	}
	if r.cfg.Partitions > 0 && id >= r.cfg.Partitions {
		return fmt.Errorf("task %d: no partition: the input has %d (tasks 0..%d)", id, r.cfg.Partitions, r.cfg.Partitions-1)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.tasks[id]; ok {
		return fmt.Errorf("task %d: %w", id, ErrTaskRunning)
	}
	if err := r.ctx.Err(); err != nil {
		return fmt.Errorf("task %d: %w", id, err)
	}
	ctx, cancel := context.WithCancel(r.ctx)
	h := &handle{id: id, epoch: epoch, cancel: cancel, drain: make(chan struct{}), done: make(chan struct{})}
	if r.cfg.Drain != nil {
		select {
		case <-r.cfg.Drain:
			h.startDrain()
		default:
		}
	}
	r.tasks[id] = h
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		err := superviseTask(ctx, r.plan, &r.cfg, h)
		// Stopped (Stop's bound, Abort, the Runner's context) is a bare
		// Canceled; a failure that wraps Canceled stays a failure.
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			err = context.Canceled
		}
		cancel()
		r.mu.Lock()
		delete(r.tasks, id)
		r.mu.Unlock()
		h.err = err
		// onExit first: once Stop or Abort return, the task's end has
		// been reported, and a new Start of it is a new run.
		r.onExit(id, err)
		close(h.done)
	}()
	return nil
}

// StopResult is how a task stopped.
type StopResult struct {
	// Drained: the task took a final checkpoint and committed it before it
	// stopped; its next owner resumes exactly there.
	Drained bool
	// Err is why it did not drain (the bound ran out, it had failed),
	// nil if it drained or was not running.
	Err error
	// Took is how long the stop took.
	Took time.Duration
}

// Stop stops task id gracefully: its sources stop reading, it takes a final
// checkpoint and commits it. If that does not finish within bound (0: no
// bound), the task is cancelled where it is and its last completed
// checkpoint stands. Stop returns once the task has released everything
// (its state stores are closed). A task that does not run stops at once.
func (r *Runner) Stop(id int, bound time.Duration) StopResult {
	start := time.Now()
	r.mu.Lock()
	h := r.tasks[id]
	r.mu.Unlock()
	if h == nil {
		return StopResult{}
	}
	h.startDrain()
	var timeout <-chan time.Time
	if bound > 0 {
		t := time.NewTimer(bound)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-h.done:
	case <-timeout:
		h.cancel()
		<-h.done
		if h.err != nil { // else it drained just as the bound ran out
			return StopResult{Err: fmt.Errorf("task %d: no final checkpoint within %v: stopped where it was", id, bound), Took: time.Since(start)}
		}
	}
	res := StopResult{Drained: h.err == nil, Took: time.Since(start)}
	if h.err != nil && h.err != context.Canceled {
		res.Err = h.err
	}
	return res
}

// Abort stops task id at once, without a final checkpoint (the worker lost
// the task: another owner may run it already). It returns once the task has
// released everything.
func (r *Runner) Abort(id int) {
	r.mu.Lock()
	h := r.tasks[id]
	r.mu.Unlock()
	if h != nil {
		h.cancel()
		<-h.done
	}
}

// Running returns the tasks that run, ascending.
func (r *Runner) Running() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]int, 0, len(r.tasks))
	for id := range r.tasks {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Epoch returns the fencing epoch task id runs with, false if it does not run.
func (r *Runner) Epoch(id int) (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if h := r.tasks[id]; h != nil {
		return h.epoch, true
	}
	return 0, false
}

// Wait waits until no task runs.
func (r *Runner) Wait() { r.wg.Wait() }

// errDrainedAfterFailure: the task was down after a failure when it was
// asked to drain; there was no final checkpoint to take.
type drainedAfterFailureError struct{ err error }

func (e *drainedAfterFailureError) Error() string {
	return fmt.Sprintf("failed while draining: %v", e.err)
}
func (e *drainedAfterFailureError) Unwrap() error { return e.err }

// DownWhenStopped reports whether err says a task was asked to stop while
// it was down after a failure, between restarts: it had no final
// checkpoint to take, and its next run (here or on another worker)
// restores its last valid checkpoint.
func DownWhenStopped(err error) bool {
	var d *drainedAfterFailureError
	return errors.As(err, &d)
}

func superviseTask(ctx context.Context, plan *Plan, cfg *Config, h *handle) error {
	id := h.id
	backoff := cfg.RestartBackoff
	failures := 0
	unusable := map[checkpoint.ID]error{}
	// down: cfg.Reachable failed since the task last completed a
	// checkpoint; its answering again ends the fault.
	down := false
	// clears counts the restarts the probe's all-clear started over since
	// the task last completed a checkpoint. Past cfg.MaxRestarts of them
	// an all-clear no longer starts the count of failures over: a task
	// that fails for a cause of its own, while a dependency comes and
	// goes (or answers slow now and then), still gives up in the end.
	clears := 0
	for {
		t := newTask(plan, cfg, id, h.epoch, h.drain, unusable)
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
			failures, backoff, down, clears = 0, cfg.RestartBackoff, false, 0
		}
		failures++
		// Restarting cannot mend these: another owner has the task, its
		// checkpoints cannot be restored without losing or repeating
		// output, the layout of its topics changed (which does not change
		// back, and a source that opened on the new layout would process
		// it), or a mis-keyed record sits in the input, to be read again.
		final := errors.Is(err, ErrSuperseded) || errors.Is(err, ErrIncompatibleCheckpoint) ||
			errors.Is(err, ErrNoValidCheckpoint) || errors.Is(err, checkpoint.ErrLayoutChanged) || errors.Is(err, ErrMisKeyed)
		restarting := (cfg.MaxRestarts < 0 || failures <= cfg.MaxRestarts) && !final
		cfg.Observer.TaskFailed(plan.Name(), id, err, restarting)
		if final {
			return fmt.Errorf("task %d: %w", id, err)
		}
		if !restarting {
			return fmt.Errorf("task %d failed %d times in a row, giving up: %w", id, failures, err)
		}
		t.log.Warn("task failed, restarting", "err", err, "attempt", failures, "backoff", backoff)
		cleared, werr := waitToRestart(ctx, cfg, h.drain, backoff, &down)
		switch {
		case werr == errDrained:
			// Draining while the task is down after a failure: there is no
			// final checkpoint to take, and the failure must not pass for
			// a clean stop.
			return fmt.Errorf("task %d: %w", id, &drainedAfterFailureError{err})
		case werr != nil:
			return werr
		case cleared:
			t.log.Info("what the task needs answers again, restarting now", "waited_of", backoff, "attempt", failures)
			backoff = cfg.RestartBackoff
			if clears++; cfg.MaxRestarts < 0 || clears <= cfg.MaxRestarts {
				failures = 0
			}
		default:
			backoff = min(2*backoff, cfg.MaxRestartBackoff)
		}
	}
}

var errDrained = errors.New("drained")

// waitToRestart waits out a failed task's backoff. With cfg.Reachable it
// probes meanwhile: a failed probe sets *down, and a probe that answers
// while *down ends the wait early with cleared true (and clears *down).
// It returns errDrained when drain closes first, ctx's error when ctx ends.
func waitToRestart(ctx context.Context, cfg *Config, drain <-chan struct{}, backoff time.Duration, down *bool) (cleared bool, err error) {
	timer := time.NewTimer(backoff)
	defer timer.Stop()
	// tick stays nil (never ready) without a probe; with one, the first
	// probe is at once: a fault seen now makes its end, later in this wait
	// or a later one, restart the task.
	var tick, every <-chan time.Time
	if cfg.Reachable != nil {
		t := time.NewTicker(cfg.ProbeInterval)
		defer t.Stop()
		first := make(chan time.Time, 1)
		first <- time.Now()
		tick, every = first, t.C
	}
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-drain:
			return false, errDrained
		case <-timer.C:
			return false, nil
		case <-tick:
			tick = every
			pctx, cancel := context.WithTimeout(ctx, max(4*cfg.ProbeInterval, time.Second))
			err := cfg.Reachable(pctx)
			cancel()
			switch {
			case err != nil:
				*down = true
			case *down:
				*down = false
				return true, nil
			}
		}
	}
}
