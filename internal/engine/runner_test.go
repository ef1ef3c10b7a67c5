package engine_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
)

// runnerTimeout bounds every wait of these tests; none should come close.
const runnerTimeout = time.Minute

// runnerEvent is one thing the observer heard about a task.
type runnerEvent struct {
	kind  string // "completed", "restored", "first" or "failed"
	epoch int64  // completed, restored: the owner's epoch
	id    checkpoint.ID
	d     time.Duration // restored, first: since the attempt began
}

// runnerLog is an Observer that keeps, per task and in order, what the
// runtime told it, and counts the records each task's chain processed (its
// hook goes into countJob). wait blocks until a condition on it holds.
type runnerLog struct {
	engine.NopObserver
	parts int

	mu        sync.Mutex
	events    map[int][]runnerEvent
	processed map[int]int64
	changed   chan struct{} // closed on a change if waiting
	waiting   bool
}

func newRunnerLog(parts int) *runnerLog {
	return &runnerLog{parts: parts, events: map[int][]runnerEvent{}, processed: map[int]int64{}, changed: make(chan struct{})}
}

// changedLocked wakes a waiter; the caller holds l.mu.
func (l *runnerLog) changedLocked() {
	if l.waiting {
		close(l.changed)
		l.changed = make(chan struct{})
		l.waiting = false
	}
}

func (l *runnerLog) add(task int, e runnerEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events[task] = append(l.events[task], e)
	l.changedLocked()
}

func (l *runnerLog) CheckpointCompleted(_ string, task int, m checkpoint.Manifest) {
	l.add(task, runnerEvent{kind: "completed", epoch: m.Epoch, id: m.Checkpoint})
}

func (l *runnerLog) TaskRestored(_ string, task int, epoch int64, from checkpoint.ID, d time.Duration) {
	l.add(task, runnerEvent{kind: "restored", epoch: epoch, id: from, d: d})
}

func (l *runnerLog) FirstRecord(_ string, task int, d time.Duration) {
	l.add(task, runnerEvent{kind: "first", d: d})
}

func (l *runnerLog) TaskFailed(_ string, task int, _ error, _ bool) {
	l.add(task, runnerEvent{kind: "failed"})
}

// hook counts a record countJob's task (n mod parts) processed.
func (l *runnerLog) hook(n int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.processed[int(n%int64(l.parts))]++
	l.changedLocked()
	return nil
}

// countLocked is how many events of kind task has had; the caller holds l.mu.
func (l *runnerLog) countLocked(task int, kind string) int {
	n := 0
	for _, e := range l.events[task] {
		if e.kind == kind {
			n++
		}
	}
	return n
}

func (l *runnerLog) count(task int, kind string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.countLocked(task, kind)
}

func (l *runnerLog) of(task int) []runnerEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events[task])
}

func (l *runnerLog) processedBy(task int) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.processed[task]
}

// lastCompleted is task's newest completed checkpoint as heard, 0 if none.
func (l *runnerLog) lastCompleted(task int) checkpoint.ID {
	l.mu.Lock()
	defer l.mu.Unlock()
	var id checkpoint.ID
	for _, e := range l.events[task] {
		if e.kind == "completed" {
			id = max(id, e.id)
		}
	}
	return id
}

// wait blocks until cond, called with l.mu held, is true.
func (l *runnerLog) wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	timeout := time.After(runnerTimeout)
	for {
		l.mu.Lock()
		ok := cond()
		l.waiting = !ok
		ch := l.changed
		l.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("no %s within %v", what, runnerTimeout)
		}
	}
}

// exitLog records every call of a Runner's onExit.
type exitLog struct {
	mu      sync.Mutex
	errs    map[int][]error
	changed chan struct{} // closed and replaced on every call
}

func newExitLog() *exitLog {
	return &exitLog{errs: map[int][]error{}, changed: make(chan struct{})}
}

func (x *exitLog) onExit(task int, err error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.errs[task] = append(x.errs[task], err)
	close(x.changed)
	x.changed = make(chan struct{})
}

func (x *exitLog) of(task int) []error {
	x.mu.Lock()
	defer x.mu.Unlock()
	return slices.Clone(x.errs[task])
}

// wait returns task's first n exits. Stop and Abort return before onExit is
// called (they wait for the task, not for its supervisor's last step), so a
// test that looks right after them waits here.
func (x *exitLog) wait(t *testing.T, task, n int) []error {
	t.Helper()
	timeout := time.After(runnerTimeout)
	for {
		x.mu.Lock()
		errs := slices.Clone(x.errs[task])
		ch := x.changed
		x.mu.Unlock()
		if len(errs) >= n {
			return errs
		}
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("task %d: %d calls of onExit within %v, want %d: %v", task, len(errs), runnerTimeout, n, errs)
		}
	}
}

// newTestRunner returns a Runner that the test waits for at its end, after
// its context is cancelled, so that no task outlives the test.
func newTestRunner(t *testing.T, ctx context.Context, plan *engine.Plan, cfg engine.Config, exits *exitLog) *engine.Runner {
	t.Helper()
	r, err := engine.NewRunner(ctx, plan, cfg, exits.onExit)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Wait)
	return r
}

// runnerConfig is the configuration of these tests: exactly once through a
// txnStore, frequent checkpoints, quick restarts.
func runnerConfig(t *testing.T, st checkpoint.Storage, store *txnStore[update], obs engine.Observer) engine.Config {
	return engine.Config{
		Storage: st, StateDir: t.TempDir(), Observer: obs,
		RestartBackoff: time.Millisecond,
		Checkpoint:     checkpoint.Config{Interval: 5 * time.Millisecond},
	}
}

func waitRunner(t *testing.T, r *engine.Runner) {
	t.Helper()
	done := make(chan struct{})
	go func() { r.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(runnerTimeout):
		t.Fatalf("tasks %v still run after %v", r.Running(), runnerTimeout)
	}
}

// newestCheckpoint is the manifest of task's newest completed checkpoint.
func newestCheckpoint(t *testing.T, st checkpoint.Storage, task int) checkpoint.Manifest {
	t.Helper()
	ids, _, err := checkpoint.ListCheckpoints(t.Context(), st, "count", task)
	if err != nil || len(ids) == 0 {
		t.Fatalf("task %d has no checkpoint (%v)", task, err)
	}
	m, err := checkpoint.ReadManifest(t.Context(), st, "count", task, ids[len(ids)-1])
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// taskOutput is task's share of countJob's output (its keys are those equal
// to task mod parts), renumbered as the output of a one-task job over the
// same records, so that checkExactlyOnce can judge one task alone: record i
// of task p is i*parts+p, so key k becomes (k-p)/parts and the sum s of c
// records (s-c*p)/parts.
func taskOutput(out []update, task, parts int) []update {
	var mine []update
	for _, u := range out {
		if int(u.Key%uint64(parts)) != task {
			continue
		}
		mine = append(mine, update{
			Key:   (u.Key - uint64(task)) / uint64(parts),
			Count: u.Count,
			Sum:   (u.Sum - u.Count*int64(task)) / int64(parts),
		})
	}
	return mine
}

// checkDrainedTask asserts that task's newest checkpoint covers exactly the
// records it processed and that its committed output holds each of them
// once, and returns that checkpoint.
func checkDrainedTask(t *testing.T, st checkpoint.Storage, store *txnStore[update], log *runnerLog, task int, keys uint64, parts int) checkpoint.Manifest {
	t.Helper()
	m := newestCheckpoint(t, st, task)
	pos := sourceOffset(t, m)
	if got := log.processedBy(task); got != pos {
		t.Fatalf("task %d processed %d records, its final checkpoint %d is at %d", task, got, m.Checkpoint, pos)
	}
	checkExactlyOnce(t, taskOutput(store.visible(), task, parts), pos, keys/uint64(parts), 1)
	return m
}

// TestRunnerStopDrainsOneTaskAndRestartResumes: Stop drains one task of a
// Runner while the other runs on; its final checkpoint covers exactly what
// it processed, and starting it again (a newer epoch) on the same Runner
// resumes from that checkpoint, the output exactly once.
func TestRunnerStopDrainsOneTaskAndRestartResumes(t *testing.T) {
	const keys, parts = 10, 2
	st := checkpoint.NewMemory(checkpoint.MemoryOptions{})
	store := newTxnStore[update]()
	log := newRunnerLog(parts)
	exits := newExitLog()
	plan := countJob(t, 1<<40, keys, parts, log.hook, store.sink())
	r := newTestRunner(t, t.Context(), plan, runnerConfig(t, st, store, log), exits)
	for _, task := range []int{0, 1} {
		if err := r.Start(task, 1); err != nil {
			t.Fatal(err)
		}
	}
	log.wait(t, "3 checkpoints of each task", func() bool {
		return log.countLocked(0, "completed") >= 3 && log.countLocked(1, "completed") >= 3
	})

	res := r.Stop(0, time.Minute)
	if !res.Drained || res.Err != nil {
		t.Fatalf("Stop(0): %+v, want drained", res)
	}
	if got := r.Running(); !slices.Equal(got, []int{1}) {
		t.Fatalf("running after Stop(0): %v, want [1]", got)
	}
	if _, ok := r.Epoch(0); ok {
		t.Fatal("Epoch(0) reports a stopped task")
	}
	if e, ok := r.Epoch(1); !ok || e != 1 {
		t.Fatalf("Epoch(1) = %d, %v; want 1, true", e, ok)
	}
	final := checkDrainedTask(t, st, store, log, 0, keys, parts)
	t.Logf("task 0 drained in %v at checkpoint %d, offset %d", res.Took, final.Checkpoint, sourceOffset(t, final))

	if err := r.Start(0, 2); err != nil {
		t.Fatal(err)
	}
	log.wait(t, "2 checkpoints of task 0 with epoch 2", func() bool {
		n := 0
		for _, e := range log.events[0] {
			if e.kind == "completed" && e.epoch == 2 {
				n++
			}
		}
		return n >= 2
	})
	var restored []runnerEvent
	for _, e := range log.of(0) {
		if e.kind == "restored" {
			restored = append(restored, e)
		}
	}
	if len(restored) != 2 || restored[1].epoch != 2 || restored[1].id != final.Checkpoint {
		t.Fatalf("task 0 restored %+v; want a second restore, with epoch 2, from its final checkpoint %d", restored, final.Checkpoint)
	}
	for _, task := range []int{0, 1} {
		if res := r.Stop(task, time.Minute); !res.Drained || res.Err != nil {
			t.Fatalf("Stop(%d): %+v, want drained", task, res)
		}
		m := checkDrainedTask(t, st, store, log, task, keys, parts)
		if task == 0 && m.Checkpoint <= final.Checkpoint {
			t.Fatalf("task 0 ran again without a newer checkpoint than %d", final.Checkpoint)
		}
	}
	if got := r.Running(); len(got) != 0 {
		t.Fatalf("running after stopping everything: %v", got)
	}
	waitRunner(t, r)
	if e0, e1 := exits.of(0), exits.of(1); len(e0) != 2 || e0[0] != nil || e0[1] != nil || len(e1) != 1 || e1[0] != nil {
		t.Fatalf("onExit: task 0 %v, task 1 %v; want nil twice and once", e0, e1)
	}
}

// stallManifests holds every manifest write, once armed, until its context
// ends: no checkpoint can complete, the final one included.
type stallManifests struct {
	checkpoint.Storage
	armed atomic.Bool
	held  chan struct{} // closed when the first write is held
	once  sync.Once
}

func (s *stallManifests) PutIfAbsent(ctx context.Context, name string, data []byte) error {
	if s.armed.Load() && strings.HasSuffix(name, "/manifest.json") {
		s.once.Do(func() { close(s.held) })
		<-ctx.Done()
		return ctx.Err()
	}
	return s.Storage.PutIfAbsent(ctx, name, data)
}

// TestRunnerStopBoundCancelsATaskThatCannotDrain: when the final checkpoint
// cannot complete, Stop cancels the task once its bound runs out and says
// so; the task's last completed checkpoint stands, and the next owner
// resumes from it with the output exactly once.
func TestRunnerStopBoundCancelsATaskThatCannotDrain(t *testing.T) {
	const keys, bound = 10, 200 * time.Millisecond
	mem := checkpoint.NewMemory(checkpoint.MemoryOptions{})
	st := &stallManifests{Storage: mem, held: make(chan struct{})}
	store := newTxnStore[update]()
	log := newRunnerLog(1)
	exits := newExitLog()
	plan := countJob(t, 1<<40, keys, 1, log.hook, store.sink())
	r := newTestRunner(t, t.Context(), plan, runnerConfig(t, st, store, log), exits)
	if err := r.Start(0, 1); err != nil {
		t.Fatal(err)
	}
	log.wait(t, "2 checkpoints", func() bool { return log.countLocked(0, "completed") >= 2 })
	st.armed.Store(true)
	select {
	case <-st.held:
	case <-time.After(runnerTimeout):
		t.Fatal("no manifest write after arming the stall")
	}

	res := r.Stop(0, bound)
	t.Logf("Stop: %+v", res)
	if res.Drained || res.Err == nil || !strings.Contains(res.Err.Error(), bound.String()) {
		t.Fatalf("Stop(0, %v) = %+v; want not drained, an error naming the bound", bound, res)
	}
	if res.Took < bound || res.Took > 5*time.Second {
		t.Fatalf("Stop took %v; want at least the bound %v and well under 5s", res.Took, bound)
	}
	if got := r.Running(); len(got) != 0 {
		t.Fatalf("running after a bounded Stop: %v", got)
	}
	if errs := exits.wait(t, 0, 1); len(errs) != 1 || !errors.Is(errs[0], context.Canceled) {
		t.Fatalf("onExit: %v; want context.Canceled once", errs)
	}
	last := log.lastCompleted(0)
	if m := newestCheckpoint(t, mem, 0); m.Checkpoint != last {
		t.Fatalf("newest checkpoint in storage %d, last completed %d", m.Checkpoint, last)
	}

	// The next owner resumes from the last completed checkpoint.
	st.armed.Store(false)
	if err := r.Start(0, 2); err != nil {
		t.Fatal(err)
	}
	log.wait(t, "a checkpoint of epoch 2", func() bool {
		return slices.ContainsFunc(log.events[0], func(e runnerEvent) bool { return e.kind == "completed" && e.epoch == 2 })
	})
	events := log.of(0)
	restored := events[slices.IndexFunc(events, func(e runnerEvent) bool { return e.kind == "restored" && e.epoch == 2 })]
	if restored.id != last {
		t.Fatalf("epoch 2 restored checkpoint %d, want %d, the last completed before the bounded stop", restored.id, last)
	}
	if res := r.Stop(0, time.Minute); !res.Drained {
		t.Fatalf("second Stop: %+v", res)
	}
	checkExactlyOnce(t, store.visible(), sourceOffset(t, newestCheckpoint(t, mem, 0)), keys, 1)
	waitRunner(t, r)
	if errs := exits.of(0); len(errs) != 2 || errs[1] != nil {
		t.Fatalf("onExit: %v; want context.Canceled (bounded stop), then nil (drained)", errs)
	}
}

// TestRunnerAbortTakesNoFinalCheckpoint: Abort stops a task where it is:
// what it processed since its last checkpoint is neither checkpointed nor
// committed. Without periodic checkpoints, the only checkpoint is the one
// of an earlier drain.
func TestRunnerAbortTakesNoFinalCheckpoint(t *testing.T) {
	const keys = 10
	st := checkpoint.NewMemory(checkpoint.MemoryOptions{})
	store := newTxnStore[update]()
	log := newRunnerLog(1)
	exits := newExitLog()
	cfg := runnerConfig(t, st, store, log)
	cfg.Checkpoint.Interval = 0
	r := newTestRunner(t, t.Context(), countJob(t, 1<<40, keys, 1, log.hook, store.sink()), cfg, exits)

	if err := r.Start(0, 1); err != nil {
		t.Fatal(err)
	}
	log.wait(t, "records", func() bool { return log.processed[0] > 0 })
	if res := r.Stop(0, time.Minute); !res.Drained {
		t.Fatalf("Stop: %+v", res)
	}
	drained := checkDrainedTask(t, st, store, log, 0, keys, 1)
	pos := sourceOffset(t, drained)

	if err := r.Start(0, 2); err != nil {
		t.Fatal(err)
	}
	log.wait(t, "records after the restore", func() bool { return log.processed[0] > pos })
	r.Abort(0)
	if got := r.Running(); len(got) != 0 {
		t.Fatalf("running after Abort: %v", got)
	}
	r.Abort(0) // not running: returns at once

	ids, _, err := checkpoint.ListCheckpoints(t.Context(), st, "count", 0)
	if err != nil {
		t.Fatal(err)
	}
	if ids[len(ids)-1] != drained.Checkpoint {
		t.Fatalf("checkpoints after Abort %v: newer than %d, the drain's", ids, drained.Checkpoint)
	}
	t.Logf("aborted %d records past checkpoint %d at offset %d", log.processedBy(0)-pos, drained.Checkpoint, pos)
	checkExactlyOnce(t, store.visible(), pos, keys, 1)
	waitRunner(t, r)
	if errs := exits.of(0); len(errs) != 2 || errs[0] != nil || !errors.Is(errs[1], context.Canceled) {
		t.Fatalf("onExit: %v; want nil (drained), then context.Canceled (aborted)", errs)
	}
}

// TestRunnerStartRefusesRunningTaskAndEndedRunner: a task runs once per
// Runner, with the epoch it was first started with; a Runner whose context
// ended starts nothing.
func TestRunnerStartRefusesRunningTaskAndEndedRunner(t *testing.T) {
	st := checkpoint.NewMemory(checkpoint.MemoryOptions{})
	store := newTxnStore[update]()
	log := newRunnerLog(2)
	exits := newExitLog()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	r := newTestRunner(t, ctx, countJob(t, 1<<40, 10, 2, log.hook, store.sink()), runnerConfig(t, st, store, log), exits)

	if err := r.Start(0, 1); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(0, 2); !errors.Is(err, engine.ErrTaskRunning) {
		t.Fatalf("second Start(0): %v, want ErrTaskRunning", err)
	}
	if e, ok := r.Epoch(0); !ok || e != 1 {
		t.Fatalf("Epoch(0) = %d, %v after a refused Start; want 1, true", e, ok)
	}
	if err := r.Start(-1, 1); err == nil {
		t.Fatal("Start(-1) accepted")
	}
	if res := r.Stop(7, time.Minute); res != (engine.StopResult{Took: res.Took}) {
		t.Fatalf("Stop of a task that does not run: %+v", res)
	}
	log.wait(t, "records", func() bool { return log.countLocked(0, "first") > 0 })

	cancel()
	if err := r.Start(1, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Start after the Runner's context ended: %v, want context.Canceled", err)
	}
	waitRunner(t, r)
	if errs := exits.of(0); len(errs) != 1 || !errors.Is(errs[0], context.Canceled) {
		t.Fatalf("onExit of task 0: %v; want context.Canceled once", errs)
	}
	if errs := exits.of(1); len(errs) != 0 {
		t.Fatalf("onExit of task 1, never started: %v", errs)
	}
}

// TestRunnerOnExit: onExit hears once of each started task, with why it
// ended.
func TestRunnerOnExit(t *testing.T) {
	injected := errors.New("injected")
	tests := []struct {
		name string
		// claim, if not 0, is a newer owner's claim made before Start.
		claim int64
		// fail fails every record: the task gives up.
		fail bool
		// stop ends the running task; nil: it ends by itself.
		stop func(r *engine.Runner, cancel context.CancelFunc)
		want func(error) bool
	}{
		{
			name: "drained",
			stop: func(r *engine.Runner, _ context.CancelFunc) { r.Stop(0, time.Minute) },
			want: func(err error) bool { return err == nil },
		},
		{
			name: "aborted",
			stop: func(r *engine.Runner, _ context.CancelFunc) { r.Abort(0) },
			want: func(err error) bool { return errors.Is(err, context.Canceled) },
		},
		{
			name: "runner context ended",
			stop: func(_ *engine.Runner, cancel context.CancelFunc) { cancel() },
			want: func(err error) bool { return errors.Is(err, context.Canceled) },
		},
		{
			name:  "superseded",
			claim: 100,
			want:  func(err error) bool { return errors.Is(err, engine.ErrSuperseded) },
		},
		{
			name: "failed for good",
			fail: true,
			want: func(err error) bool { return errors.Is(err, injected) && !errors.Is(err, context.Canceled) },
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := checkpoint.NewMemory(checkpoint.MemoryOptions{})
			if tc.claim != 0 {
				if err := checkpoint.Claim(t.Context(), st, "count", 0, tc.claim); err != nil {
					t.Fatal(err)
				}
			}
			store := newTxnStore[update]()
			log := newRunnerLog(1)
			hook := log.hook
			if tc.fail {
				hook = func(int64) error { return injected }
			}
			cfg := runnerConfig(t, st, store, log)
			cfg.MaxRestarts = 1
			exits := newExitLog()
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			r := newTestRunner(t, ctx, countJob(t, 1<<40, 10, 1, hook, store.sink()), cfg, exits)
			if err := r.Start(0, 7); err != nil {
				t.Fatal(err)
			}
			if tc.stop != nil {
				log.wait(t, "records", func() bool { return log.countLocked(0, "first") > 0 })
				tc.stop(r, cancel)
			}
			waitRunner(t, r)
			errs := exits.of(0)
			if len(errs) != 1 || !tc.want(errs[0]) {
				t.Fatalf("onExit called with %v", errs)
			}
			t.Logf("onExit: %v", errs[0])
		})
	}
}

// TestRunnerObserverHearsEachAttempt: every attempt of a task, restarts
// after a failure and starts by a new owner alike, is restored once, with
// the owner's epoch, from the newest checkpoint completed before it, and
// then processes its first record, once.
func TestRunnerObserverHearsEachAttempt(t *testing.T) {
	const keys = 10
	st := checkpoint.NewMemory(checkpoint.MemoryOptions{})
	store := newTxnStore[update]()
	log := newRunnerLog(1)
	exits := newExitLog()
	var injected atomic.Bool
	hook := func(n int64) error {
		_ = log.hook(n)
		if n == 5000 && !injected.Swap(true) {
			return errors.New("injected failure")
		}
		return nil
	}
	r := newTestRunner(t, t.Context(), countJob(t, 1<<40, keys, 1, hook, store.sink()), runnerConfig(t, st, store, log), exits)
	epochs := []int64{3, 3, 4} // the failed attempt restarts with its owner's epoch
	if err := r.Start(0, 3); err != nil {
		t.Fatal(err)
	}
	log.wait(t, "the first record of the attempt after the failure", func() bool { return log.countLocked(0, "first") >= 2 })
	if res := r.Stop(0, time.Minute); !res.Drained {
		t.Fatalf("Stop: %+v", res)
	}
	if err := r.Start(0, 4); err != nil {
		t.Fatal(err)
	}
	log.wait(t, "the first record of the new owner", func() bool { return log.countLocked(0, "first") >= 3 })
	if res := r.Stop(0, time.Minute); !res.Drained {
		t.Fatalf("Stop: %+v", res)
	}

	events := log.of(0)
	var (
		attempts  int
		completed checkpoint.ID
		restored  runnerEvent
		firsts    int // in the current attempt
	)
	for i, e := range events {
		switch e.kind {
		case "completed":
			completed = e.id
		case "restored":
			if attempts > 0 && firsts != 1 {
				t.Fatalf("event %d: attempt %d heard of %d first records, want 1: %+v", i, attempts, firsts, events)
			}
			if attempts >= len(epochs) || e.epoch != epochs[attempts] || e.id != completed {
				t.Fatalf("event %d: restore %+v; want attempt %d of %d, epoch %v, from checkpoint %d: %+v", i, e, attempts+1, len(epochs), epochs, completed, events)
			}
			attempts++
			restored, firsts = e, 0
		case "first":
			if attempts == 0 {
				t.Fatalf("first record before any restore: %+v", events)
			}
			if e.d < restored.d {
				t.Fatalf("event %d: first record %v into the attempt, before its restore (%v)", i, e.d, restored.d)
			}
			firsts++
		}
	}
	if attempts != len(epochs) || firsts != 1 {
		t.Fatalf("%d attempts, the last with %d first records; want %d and 1: %+v", attempts, firsts, len(epochs), events)
	}
	if n := log.count(0, "failed"); n != 1 {
		t.Fatalf("%d failures heard, want the one injected", n)
	}
	checkExactlyOnce(t, store.visible(), sourceOffset(t, newestCheckpoint(t, st, 0)), keys, 1)
}

// TestRunnerConfigDrainDrainsEveryTask: closing Config.Drain drains every
// task of a Runner, each with a final checkpoint that covers all it
// processed; a task started afterwards drains at once.
func TestRunnerConfigDrainDrainsEveryTask(t *testing.T) {
	const keys, parts = 10, 2
	st := checkpoint.NewMemory(checkpoint.MemoryOptions{})
	store := newTxnStore[update]()
	log := newRunnerLog(parts)
	exits := newExitLog()
	drain := make(chan struct{})
	cfg := runnerConfig(t, st, store, log)
	cfg.Drain = drain
	r := newTestRunner(t, t.Context(), countJob(t, 1<<40, keys, parts, log.hook, store.sink()), cfg, exits)
	for _, task := range []int{0, 1} {
		if err := r.Start(task, 1); err != nil {
			t.Fatal(err)
		}
	}
	log.wait(t, "2 checkpoints of each task", func() bool {
		return log.countLocked(0, "completed") >= 2 && log.countLocked(1, "completed") >= 2
	})
	close(drain)
	waitRunner(t, r)
	finals := map[int]checkpoint.ID{}
	for _, task := range []int{0, 1} {
		if errs := exits.of(task); len(errs) != 1 || errs[0] != nil {
			t.Fatalf("onExit of task %d: %v; want nil once", task, errs)
		}
		finals[task] = checkDrainedTask(t, st, store, log, task, keys, parts).Checkpoint
	}

	if err := r.Start(0, 2); err != nil {
		t.Fatal(err)
	}
	waitRunner(t, r)
	if errs := exits.of(0); len(errs) != 2 || errs[1] != nil {
		t.Fatalf("onExit of task 0 started after the drain: %v; want nil", errs)
	}
	if m := checkDrainedTask(t, st, store, log, 0, keys, parts); m.Checkpoint <= finals[0] || m.Epoch != 2 {
		t.Fatalf("task 0 started after the drain: newest checkpoint %d of epoch %d, want one after %d of epoch 2", m.Checkpoint, m.Epoch, finals[0])
	}
}

// TestRunnerFailureWrappingCanceledIsNotAStop: a task that fails for good
// with an error that wraps context.Canceled (a user function's) is a
// failure, not a stop: onExit hears the failure and Run returns it.
func TestRunnerFailureWrappingCanceledIsNotAStop(t *testing.T) {
	fail := func(int64) error { return fmt.Errorf("lookup: %w", context.Canceled) }
	plan := countJob(t, 1<<40, 10, 1, fail, newTxnStore[update]().sink())
	cfg := engine.Config{Storage: checkpoint.NewMemory(checkpoint.MemoryOptions{}), StateDir: t.TempDir(), RestartBackoff: time.Millisecond, MaxRestarts: 1}
	exits := newExitLog()
	r := newTestRunner(t, t.Context(), plan, cfg, exits)
	if err := r.Start(0, 1); err != nil {
		t.Fatal(err)
	}
	waitRunner(t, r)
	if errs := exits.of(0); len(errs) != 1 || errs[0] == context.Canceled {
		t.Errorf("onExit: %v; want the task's failure, not a bare context.Canceled", errs)
	}
	cfg.Tasks, cfg.StateDir, cfg.Storage = []int{0}, t.TempDir(), checkpoint.NewMemory(checkpoint.MemoryOptions{})
	if err := engine.Run(t.Context(), plan, cfg); err == nil {
		t.Error("Run returned nil for a task that failed for good")
	}
}

// TestRunReportsTheFailureNotTheStartAfterIt: a task that fails for good
// cancels the others, and may do so while Run is still starting them. Run
// reports that failure, not that a later task could not start (a CI run
// once got "task 1: context canceled" in place of a mis-keyed record). A
// Run whose ctx ended before it started anything returns nil, as its doc
// says.
func TestRunReportsTheFailureNotTheStartAfterIt(t *testing.T) {
	const tasks = 64
	boom := errors.New("record 0 is bad")
	fail := func(n int64) error {
		if n == 0 {
			return boom
		}
		return nil
	}
	plan := countJob(t, 1<<40, 10, tasks, fail, newTxnStore[update]().sink())
	cfg := engine.Config{Storage: checkpoint.NewMemory(checkpoint.MemoryOptions{}), StateDir: t.TempDir(), MaxRestarts: 1, RestartBackoff: time.Millisecond}
	for id := range tasks {
		cfg.Tasks = append(cfg.Tasks, id)
	}
	if err := engine.Run(t.Context(), plan, cfg); !errors.Is(err, boom) {
		t.Fatalf("Run: %v, want task 0's failure (%v)", err, boom)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	cfg = engine.Config{Storage: checkpoint.NewMemory(checkpoint.MemoryOptions{}), StateDir: t.TempDir(), Tasks: []int{0, 1}}
	if err := engine.Run(ctx, plan, cfg); err != nil {
		t.Fatalf("Run with a cancelled ctx: %v, want nil", err)
	}
}
