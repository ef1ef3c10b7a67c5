package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/state"
)

// task is one running instance of a job's graph: every operator for one
// partition index. It owns all of its goroutines: one per root, one for the
// checkpoint driver, and the uploads of asynchronous snapshots.
type task struct {
	job      string
	id       int
	plan     *Plan
	cfg      *Config
	ctx      context.Context
	log      *slog.Logger
	observer Observer
	storage  checkpoint.Storage
	backends state.Factory
	stateDir string
	now      func() time.Time
	// epoch is the owner's fencing epoch; attempt is fresh for each run of
	// the task, so that no two attempts or owners write the same object.
	epoch   int64
	attempt string
	// drain, when closed, stops the task gracefully (final checkpoint).
	drain   <-chan struct{}
	started time.Time
	// firstRecord is set once the observer heard of the first record.
	firstRecord atomic.Bool

	rootIdx   []int // per node: index of the root whose goroutine runs it
	roots     []*root
	endpoints [][]any // per node, per input: its endpoint[T]
	restored  map[string]*checkpoint.Ack
	// restoredFrom is the checkpoint the task restored from, 0 if none;
	// listedCompleted the newest completed checkpoint its restore saw.
	restoredFrom    checkpoint.ID
	listedCompleted checkpoint.ID
	closers         []func() error
	// openers run after every node is built and its state restored.
	openers []func() error
	// committers are the task's sinks, which know what they committed.
	committers []committer
	// unusable holds the checkpoints whose state could not be restored
	// (a missing or corrupt file), kept by the supervisor across attempts:
	// restore walks back past them.
	unusable map[checkpoint.ID]error

	driver *checkpoint.Driver
	// triggered is closed at the task's first trigger, when it takes a
	// checkpoint before reading (see run); nil otherwise.
	triggered     chan struct{}
	triggeredOnce sync.Once
	startID       checkpoint.ID // that checkpoint's id; t.mu
	uploads       sync.WaitGroup
	// retain asks the retention goroutine to clean up after a completed
	// checkpoint; requests made while it works coalesce into one.
	retain chan struct{}

	mu          sync.Mutex
	liveSources int
	allEnded    bool
	// inputEnded mirrors allEnded for the roots' timer checks: once every
	// source has ended, processing-time timers no longer fire, so nothing
	// is emitted after the final barrier that no checkpoint would commit.
	inputEnded atomic.Bool
	finalID    checkpoint.ID // the checkpoint after which the task finishes
	completed  bool          // a checkpoint other than the start one completed during this run
	// lastCompleted is the newest checkpoint completed in this run.
	lastCompleted checkpoint.ID
}

func newTask(plan *Plan, cfg *Config, id int, epoch int64, drain <-chan struct{}, unusable map[checkpoint.ID]error) *task {
	t := &task{
		epoch:    epoch,
		attempt:  newAttemptID(),
		drain:    drain,
		unusable: unusable,
		job:      plan.g.name,
		id:       id,
		plan:     plan,
		cfg:      cfg,
		log:      cfg.Logger.With("job", plan.g.name, "task", id, "epoch", epoch),
		observer: cfg.Observer,
		storage:  cfg.Storage,
		backends: cfg.StateBackend,
		stateDir: filepath.Join(cfg.StateDir, "task-"+strconv.Itoa(id)),
		now:      cfg.Now,
	}
	// Every source and multi-input node starts a root; a single-input node
	// runs on the root of its input.
	nodes := plan.g.nodes
	t.rootIdx = make([]int, len(nodes))
	t.endpoints = make([][]any, len(nodes))
	for i, n := range nodes {
		t.endpoints[i] = make([]any, len(n.inputs))
		if n.kind == kindSource || n.kind == kindMulti {
			r := &root{t: t, name: n.name}
			r.mail.init()
			t.rootIdx[i] = len(t.roots)
			t.roots = append(t.roots, r)
			if n.kind == kindSource {
				t.liveSources++
			}
			continue
		}
		t.rootIdx[i] = t.rootIdx[n.inputs[0].id]
	}
	return t
}

// triggerPhase is how far into its interval task id's periodic
// checkpoints fall. Tasks started together would otherwise take theirs at
// the same moment, and their flushes, snapshots and synced manifest writes
// would meet (four tasks' manifests took 3.5 ms written together, 0.6
// alone). Task id's phase is the fraction of id times the golden ratio,
// which spreads any number of tasks about evenly over the interval. It
// changes only when each task's checkpoints fall: they stay independent.
func triggerPhase(id int, interval time.Duration) time.Duration {
	const phi = 0.6180339887498949 // the golden ratio's fraction
	_, f := math.Modf(float64(id) * phi)
	return time.Duration(f * float64(interval))
}

// newAttemptID names one run of a task in the objects it writes.
func newAttemptID() string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand does not fail
	return hex.EncodeToString(b[:])
}

// recordsFlowing tells the observer of the task's first record, once.
func (t *task) recordsFlowing() {
	if !t.firstRecord.Swap(true) {
		t.observer.FirstRecord(t.job, t.id, time.Since(t.started))
	}
}

func (t *task) rootOf(n *node) *root { return t.roots[t.rootIdx[n.id]] }

func (t *task) base(n *node) opBase {
	return opBase{t: t, name: n.name, cursor: &t.rootOf(n).cursor}
}

func (t *task) info(operator string) TaskInfo {
	return TaskInfo{Job: t.job, Task: t.id, Operator: operator, Logger: t.log.With("operator", operator), NewerCheckpoint: t.newerCheckpoint}
}

// newerCheckpoint reports whether a checkpoint completed after restore
// listed them (see TaskInfo.NewerCheckpoint).
func (t *task) newerCheckpoint(ctx context.Context) (bool, error) {
	completed, _, err := checkpoint.ListCheckpoints(ctx, t.storage, t.job, t.id)
	if err != nil {
		return false, fmt.Errorf("list checkpoints: %w", err)
	}
	return len(completed) > 0 && completed[len(completed)-1] > t.listedCompleted, nil
}

// setEndpoints registers a single-input operator as its own input endpoint.
func (t *task) setEndpoints(n *node, e any) { t.endpoints[n.id][0] = e }

func (t *task) addNotifiee(n *node, x notifiee) {
	r := t.rootOf(n)
	r.notifiees = append(r.notifiees, x)
}

func (t *task) addTimed(n *node, x timed) {
	r := t.rootOf(n)
	r.timed = append(r.timed, x)
}

func (t *task) addCloser(f func() error) { t.closers = append(t.closers, f) }

func (t *task) addOpener(f func() error) { t.openers = append(t.openers, f) }

func (t *task) restoredAck(operator string) *checkpoint.Ack { return t.restored[operator] }

func (t *task) ack(id checkpoint.ID, a checkpoint.Ack) { t.driver.Ack(id, a) }

func (t *task) decline(id checkpoint.ID, err error) {
	t.log.Warn("checkpoint declined", "checkpoint", id, "err", err)
	t.driver.Decline(id, err)
}

// sourceEnded is called by a source whose input is exhausted. Once every
// source has ended, the task asks for a final checkpoint; when it completes,
// the roots finish (see NotifyComplete).
func (t *task) sourceEnded(name string) {
	t.mu.Lock()
	t.liveSources--
	last := t.liveSources == 0
	if last {
		t.allEnded = true
		t.inputEnded.Store(true)
	}
	t.mu.Unlock()
	t.log.Debug("source ended", "operator", name)
	if last {
		t.driver.TriggerNow()
	}
}

// TriggerCheckpoint implements checkpoint.Executor.
func (t *task) TriggerCheckpoint(id checkpoint.ID, _ time.Time) error {
	t.mu.Lock()
	if t.allEnded && t.finalID == 0 {
		t.finalID = id
	}
	t.mu.Unlock()
	for _, r := range t.roots {
		if r.source {
			r.mail.post(mail{kind: mailTrigger, id: id})
		}
	}
	if t.triggered != nil {
		t.triggeredOnce.Do(func() {
			t.mu.Lock()
			t.startID = id
			t.mu.Unlock()
			close(t.triggered)
		})
	}
	return nil
}

// NotifyComplete implements checkpoint.Executor.
func (t *task) NotifyComplete(id checkpoint.ID) {
	t.mu.Lock()
	finish := t.finalID != 0 && id >= t.finalID
	// The checkpoint at the start is not progress: nothing was read.
	t.completed = t.completed || id != t.startID
	t.lastCompleted = max(t.lastCompleted, id)
	t.mu.Unlock()
	// Every root hears of the completion before any source finishes: a
	// multi-input root must commit its sinks before the end of its inputs
	// (which follows a finish) can end it.
	for _, r := range t.roots {
		r.mail.post(mail{kind: mailComplete, id: id})
	}
	if finish {
		for _, r := range t.roots {
			if r.source {
				r.mail.post(mail{kind: mailFinish})
			}
		}
	}
	select {
	case t.retain <- struct{}{}:
	default:
	}
}

// retention deletes what no retained checkpoint needs, after a completed
// checkpoint, at most once per ten checkpoint intervals or a second: each
// call lists the task's objects. The driver tells r the manifest of each
// checkpoint it completes, so that r need not read it back (reading back
// ten a second cost 3.7% of the CPU at 100 ms checkpoints).
// Deleting later is safe (see checkpoint.Retainer). Its failures are
// logged, never fatal: the next call finishes the work.
func (t *task) retention(ctx context.Context, r *checkpoint.Retainer) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.retain:
		}
		next := time.Now().Add(min(10*t.cfg.Checkpoint.Interval, retainEvery))
		if _, err := r.Retain(ctx); err != nil && ctx.Err() == nil {
			t.log.Warn("checkpoint retention failed; the next checkpoint retries", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(next)):
		}
	}
}

// retainEvery bounds the time between two retention calls of a task.
const retainEvery = time.Second

// NotifyAborted implements checkpoint.Executor.
func (t *task) NotifyAborted(id checkpoint.ID, err error) {
	t.log.Warn("checkpoint aborted", "checkpoint", id, "err", err)
	t.mu.Lock()
	retry := t.finalID == id
	if retry {
		t.finalID = 0
	}
	t.mu.Unlock()
	for _, r := range t.roots {
		r.mail.post(mail{kind: mailAborted, id: id})
	}
	if retry {
		t.driver.TriggerNow()
	}
}

// checkRestoredOperators refuses a checkpoint with state of an operator the
// job no longer has: restoring without it would drop that state silently.
// A source's state is its positions: without them a renamed source would
// read its input again from the start, and a job downstream of it would
// count that input twice.
func (t *task) checkRestoredOperators() error {
	known := map[string]bool{}
	for _, n := range t.plan.g.nodes {
		known[n.name] = true
	}
	for _, name := range slices.Sorted(maps.Keys(t.restored)) {
		a := t.restored[name]
		switch {
		case known[name]:
		case len(a.Committables) > 0:
			return fmt.Errorf("%w: checkpoint %d has pending transactions of sink %q, which the job does not have: "+
				"run the job that has it until it drains (SIGTERM), then upgrade", ErrIncompatibleCheckpoint, t.restoredFrom, name)
		case t.cfg.AllowNonRestoredState && (len(a.Sources) > 0 || a.State != nil):
			t.log.Warn("dropping the checkpoint's state of an operator the job does not have (allow non-restored state)",
				"checkpoint", t.restoredFrom, "operator", name, "source_positions", len(a.Sources), "state", a.State != nil)
		case len(a.Sources) > 0:
			return fmt.Errorf("%w: checkpoint %d has the positions of source %q, which the job does not have: "+
				"a renamed source would read its input again from its start (operator names key a checkpoint; "+
				"--allow-non-restored-state drops them)", ErrIncompatibleCheckpoint, t.restoredFrom, name)
		case a.State != nil:
			return fmt.Errorf("%w: checkpoint %d has state of operator %q, which the job does not have "+
				"(--allow-non-restored-state drops it)", ErrIncompatibleCheckpoint, t.restoredFrom, name)
		}
	}
	return nil
}

// run builds the task, restores it and runs it until its input ends (after
// a final checkpoint), ctx is cancelled, or it fails.
func (t *task) run(ctx context.Context) (err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t.ctx = ctx
	t.started = time.Now()
	defer func() {
		err = t.holdFor(err)
		cancel()
		t.uploads.Wait()
		for _, c := range slices.Backward(t.closers) {
			// A closer's failure to keep is kept even when the run
			// failed first (see Holding).
			if cerr := c(); cerr != nil {
				if cerr = t.holdFor(cerr); err == nil {
					err = cerr
				}
			}
		}
	}()

	highest, err := t.restore(ctx)
	if err != nil {
		return err
	}
	if err := t.checkRestoredOperators(); err != nil {
		return err
	}
	// A task without a checkpoint takes one before it reads a record: the
	// positions it starts from (a "latest" resolved to offsets) and no
	// transaction. A restore can always walk back to it: without it, a
	// zombie owner that fences this one's first checkpoint's transactions
	// (opening its sinks a moment after this owner claimed) would leave the
	// task with no valid checkpoint, stopped for good.
	atStart := t.restoredFrom == 0 && t.cfg.Checkpoint.Interval > 0
	if atStart {
		t.triggered = make(chan struct{})
	}
	participants := t.plan.Operators()
	coord := checkpoint.NewCoordinator(t.cfg.Checkpoint, participants, highest,
		time.Now().Add(-triggerPhase(t.id, t.cfg.Checkpoint.Interval)))
	var retainer *checkpoint.Retainer
	if t.cfg.Retained > 0 {
		retainer = checkpoint.NewRetainer(t.storage, t.job, t.id, checkpoint.RetainOptions{Retained: t.cfg.Retained, Logger: t.log})
	}
	t.driver = checkpoint.NewDriver(checkpoint.DriverConfig{
		Coordinator: coord,
		Storage:     t.storage,
		Job:         t.job,
		Task:        t.id,
		Epoch:       t.epoch,
		Executor:    t,
		Logger:      t.cfg.Logger, // the driver adds job and task itself
		OnComplete: func(m checkpoint.Manifest) {
			if retainer != nil {
				retainer.Completed(m)
			}
			t.observer.CheckpointCompleted(t.job, t.id, m)
		},
		OnAborted:         func(id checkpoint.ID, err error) { t.observer.CheckpointAborted(t.job, t.id, id, err) },
		CheckpointAtStart: atStart,
	})

	// Everything the task starts stops when any part of it fails: senders
	// blocked on a full channel and uploads included.
	g, gctx := errgroup.WithContext(ctx)
	t.ctx = gctx
	nodes := t.plan.g.nodes
	for i := len(nodes) - 1; i >= 0; i-- {
		if err := nodes[i].build(t); err != nil {
			return err
		}
	}
	// The sinks fence every other owner when they open: not if a newer
	// one claimed the task while this one restored.
	if err := t.stillOwner(ctx); err != nil {
		return err
	}
	for _, open := range t.openers {
		if err := open(); err != nil {
			return err
		}
	}
	t.observer.TaskRestored(t.job, t.id, t.epoch, t.restoredFrom, time.Since(t.started))

	dctx, stopDriver := context.WithCancel(gctx)
	defer stopDriver()
	if retainer != nil {
		t.retain = make(chan struct{}, 1)
		g.Go(func() error { return t.retention(dctx, retainer) })
	}
	g.Go(func() error { return t.driver.Run(dctx) })
	if t.triggered != nil {
		// The sources hold the first barrier before their first poll.
		select {
		case <-t.triggered:
		case <-dctx.Done():
			stopDriver()
			return g.Wait()
		}
	}
	var live sync.WaitGroup
	for _, r := range t.roots {
		live.Add(1)
		g.Go(func() error {
			err := r.run(gctx)
			live.Done()
			if err != nil && !errors.Is(err, context.Canceled) {
				return fmt.Errorf("task %d: %w", t.id, err)
			}
			return err
		})
	}
	// A drain makes every source end as if its input were exhausted: the
	// final checkpoint and its commit follow as for a bounded input.
	g.Go(func() error {
		select {
		case <-dctx.Done():
		case <-t.drain:
			t.log.Info("draining: final checkpoint, then stop")
			for _, r := range t.roots {
				if r.source {
					r.mail.post(mail{kind: mailDrain})
				}
			}
		}
		return nil
	})
	// When every root has ended normally, the final checkpoint is complete:
	// stop the driver.
	g.Go(func() error {
		live.Wait()
		stopDriver()
		return nil
	})
	if err := g.Wait(); err != nil {
		// What the sinks committed since the newest manifest is known
		// here for certain: once another owner re-initialised the
		// transactional ids (a zombie fenced this one, say), the broker no
		// longer tells a committed transaction from an aborted one, and the
		// restart must read the transactions' markers from the output
		// instead, which retention may have removed by then.
		// The restored checkpoint's transactions, committed when the sinks
		// opened, count too: no manifest of this run may record them.
		t.mu.Lock()
		last := max(t.lastCompleted, t.restoredFrom)
		t.mu.Unlock()
		// Bounded tighter than a checkpoint: a task stopped at once (its
		// worker lost the group session) must not wait long on a storage
		// that does not answer.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), failedRecordTimeout)
		t.recordCommits(rctx, last, "the failed run's",
			"should another owner re-initialise the transactional ids before a manifest records them, the restart "+
				"reads their outcome from the markers in the output's log, and fails if that no longer holds them")
		cancel()
		return err
	}
	// Not cut short by a stop that comes now (a second signal): the
	// final checkpoint's transactions are committed, and this record is
	// what keeps their outcome once the broker forgets them.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(t.cfg.Checkpoint.Timeout, failedRecordTimeout))
	defer cancel()
	t.recordFinalCommits(rctx)
	return nil
}

// committer is a sink operator, as the task sees it at its end.
type committer interface {
	// committedUnrecorded returns the transactions it committed that no
	// completed checkpoint's manifest records.
	committedUnrecorded() []checkpoint.Committable
}

// recordFinalCommits writes the commit record of the task's final
// checkpoint, once every root ended after it: no later manifest will
// record that its transactions were committed, and the broker forgets
// them in time (see checkpoint.CommitRecord). A failure is logged, not
// returned: the output is right, and should the broker forget the
// transactions before the task runs again, restore says it cannot tell
// instead of guessing.
func (t *task) recordFinalCommits(ctx context.Context) {
	t.mu.Lock()
	final := t.finalID
	t.mu.Unlock()
	t.recordCommits(ctx, final, "the final checkpoint's",
		"should the broker forget them before the task runs again, its restore reads their outcome from the markers "+
			"in the output's log, and fails if that no longer holds them")
}

// failedRecordTimeout bounds the commit record of a failed run.
const failedRecordTimeout = 5 * time.Second

// recordCommits writes a commit record, under checkpoint id, of the
// transactions the sinks committed that no manifest records; whose names
// them in the logs, and without says what follows if the record is missing.
func (t *task) recordCommits(ctx context.Context, id checkpoint.ID, whose, without string) {
	var cs []checkpoint.Committable
	for _, c := range t.committers {
		cs = append(cs, c.committedUnrecorded()...)
	}
	if id == 0 || len(cs) == 0 {
		return
	}
	if d := t.cfg.Checkpoint.Timeout; d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	r := checkpoint.CommitRecord{Job: t.job, Task: t.id, Checkpoint: id, Epoch: t.epoch, Timestamp: t.now(), Committed: cs}
	if err := checkpoint.WriteCommitRecord(ctx, t.storage, r, t.attempt); err != nil {
		t.log.Error("could not record that "+whose+" transactions committed; "+without, "checkpoint", id, "err", err)
		return
	}
	t.log.Debug("recorded "+whose+" commits", "checkpoint", id, "transactions", len(cs))
}
