package checkpoint

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// DefaultTimeout is the checkpoint timeout the worker configures when the
// user sets none. A Config with Timeout 0 has no timeout at all.
const DefaultTimeout = 10 * time.Minute

// ErrTimeout is wrapped by the error of a checkpoint aborted because it was
// not acknowledged by every participant within Config.Timeout.
var ErrTimeout = errors.New("timed out")

// ErrTooManyFailures is wrapped by the error of a Fail action.
var ErrTooManyFailures = errors.New("too many consecutive failed checkpoints")

// Config drives the coordinator of one task.
type Config struct {
	// Interval is the time from one trigger to the next. 0: no periodic
	// checkpoints (TriggerNow still works).
	Interval time.Duration
	// Timeout aborts a checkpoint not acknowledged by every participant
	// within it. 0: no timeout (the worker defaults to DefaultTimeout). It
	// does not cover the manifest write: once the manifest is being written,
	// its outcome alone decides the checkpoint.
	Timeout time.Duration
	// MinPause is the least time between the end (completion or abort) of one
	// checkpoint and the periodic trigger of the next. TriggerNow waives it.
	MinPause time.Duration
	// TolerableFailures is how many consecutive failed checkpoints are
	// tolerated; the next failure makes the coordinator emit Fail.
	TolerableFailures int
}

// Validate reports every invalid setting, each error naming it.
func (c Config) Validate() error {
	var errs []error
	if c.Interval < 0 {
		errs = append(errs, fmt.Errorf("checkpoint.interval: must be >= 0, got %v", c.Interval))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("checkpoint.timeout: must be >= 0 (0: no timeout), got %v", c.Timeout))
	}
	if c.MinPause < 0 {
		errs = append(errs, fmt.Errorf("checkpoint.min-pause: must be >= 0, got %v", c.MinPause))
	}
	if c.TolerableFailures < 0 {
		errs = append(errs, fmt.Errorf("checkpoint.tolerable-failures: must be >= 0, got %d", c.TolerableFailures))
	}
	return errors.Join(errs...)
}

// Action is what the coordinator asks its driver to do, in the order given.
type Action interface{ isAction() }

// Trigger asks the task to start checkpoint ID: sources record their
// positions and emit barrier ID.
type Trigger struct {
	ID        ID
	Timestamp time.Time
}

// WriteManifest asks for the manifest of checkpoint ID to be written with
// Storage.PutIfAbsent; every participant acked. Acks are sorted by Operator.
// The driver reports the outcome with ManifestWritten or ManifestFailed.
type WriteManifest struct {
	ID        ID
	Timestamp time.Time
	Acks      []Ack
}

// NotifyComplete tells the task that checkpoint ID is durable. Completing ID
// completes every earlier checkpoint too (sinks commit everything pending up
// to it, including what aborted checkpoints left pre-committed).
type NotifyComplete struct {
	ID       ID
	Duration time.Duration
}

// NotifyAborted tells the task that checkpoint ID will never complete.
type NotifyAborted struct {
	ID  ID
	Err error
}

// Fail says more consecutive checkpoints failed than tolerated; the task
// must fail. The coordinator does nothing after it.
type Fail struct {
	Err error
}

func (Trigger) isAction()        {}
func (WriteManifest) isAction()  {}
func (NotifyComplete) isAction() {}
func (NotifyAborted) isAction()  {}
func (Fail) isAction()           {}

// Stats summarises a coordinator's history, for metrics and the status page.
type Stats struct {
	Triggered           int64
	Completed           int64
	Failed              int64
	ConsecutiveFailures int
	// LastCompleted is the newest completed checkpoint (0: none) and
	// LastDuration its trigger-to-complete time.
	LastCompleted ID
	LastDuration  time.Duration
	// LastFailure is the error of the newest failed checkpoint.
	LastFailure error
	// InFlight is the checkpoint in flight, 0 if none.
	InFlight ID
}

// Coordinator decides when the checkpoints of one task are triggered,
// completed and aborted. It is a pure state machine in the style of etcd
// raft's RawNode: no goroutines, clocks or I/O; every method takes the
// current time and returns the actions to carry out in order. It is not safe
// for concurrent use: one goroutine (see Driver) drives it.
//
// Invariants: at most one checkpoint is in flight; IDs only grow; a
// periodic trigger comes Interval after the previous trigger and never less
// than MinPause after the previous checkpoint ended.
type Coordinator struct {
	cfg          Config
	participants []string // sorted, unique
	nextID       ID

	lastTrigger time.Time // or the creation time, before the first trigger
	lastEnd     time.Time
	ended       bool // lastEnd is set
	requested   bool // TriggerNow while a checkpoint was in flight
	failed      bool // Fail was emitted

	pending *pending
	stats   Stats
}

type pending struct {
	id      ID
	ts      time.Time
	acks    map[string]Ack
	writing bool // WriteManifest emitted; the outcome decides
}

// NewCoordinator returns a coordinator for a task whose operators are
// participants (each must ack a checkpoint for it to complete). The next
// checkpoint is lastID+1: pass the highest ID found in storage, complete or
// not (see ListCheckpoints). The first periodic trigger is Interval after
// now. cfg must be valid (see Config.Validate); NewCoordinator panics
// otherwise, since that is a programming error.
func NewCoordinator(cfg Config, participants []string, lastID ID, now time.Time) *Coordinator {
	if err := cfg.Validate(); err != nil {
		panic(fmt.Sprintf("checkpoint.NewCoordinator: invalid config: %v", err))
	}
	ps := slices.Clone(participants)
	slices.Sort(ps)
	ps = slices.Compact(ps)
	return &Coordinator{
		cfg:          cfg,
		participants: ps,
		nextID:       lastID + 1,
		lastTrigger:  now,
	}
}

// Tick advances time: it aborts a checkpoint past its timeout and triggers
// one that is due. Call it no later than NextWake.
func (c *Coordinator) Tick(now time.Time) []Action {
	if c.failed {
		return nil
	}
	var acts []Action
	if p := c.pending; p != nil && !p.writing && c.cfg.Timeout > 0 && !now.Before(p.ts.Add(c.cfg.Timeout)) {
		acts = c.abort(acts, fmt.Errorf("checkpoint %d: %w after %v (%s)", p.id, ErrTimeout, c.cfg.Timeout, c.missing(p)), now)
	}
	return c.maybeTrigger(acts, now)
}

// TriggerNow requests a checkpoint as soon as none is in flight, waiving
// MinPause. Requests made while one is in flight collapse into one. The
// worker uses it for the final checkpoint on shutdown.
func (c *Coordinator) TriggerNow(now time.Time) []Action {
	if c.failed {
		return nil
	}
	c.requested = true
	return c.maybeTrigger(nil, now)
}

// TriggerFirst triggers a checkpoint at once, before any periodic one,
// without moving the periodic schedule: the checkpoint a task with none
// takes before it reads a record (see DriverConfig.CheckpointAtStart).
func (c *Coordinator) TriggerFirst(now time.Time) []Action {
	if c.failed || c.pending != nil || c.stats.Triggered > 0 {
		return nil
	}
	schedule := c.lastTrigger
	acts := c.TriggerNow(now)
	c.lastTrigger = schedule
	return acts
}

// Ack records a participant's acknowledgement of checkpoint id. Once every
// participant acked, it returns WriteManifest. Acks of a checkpoint not in
// flight, from a non-participant, or repeated, are ignored.
func (c *Coordinator) Ack(id ID, ack Ack, now time.Time) []Action {
	p := c.pending
	if c.failed || p == nil || p.id != id || p.writing || !c.isParticipant(ack.Operator) {
		return nil
	}
	if _, dup := p.acks[ack.Operator]; dup {
		return nil
	}
	p.acks[ack.Operator] = ack
	return c.maybeWrite(nil)
}

// Decline aborts checkpoint id because a participant failed it. A decline of
// a checkpoint not in flight, or whose manifest is being written, is ignored.
func (c *Coordinator) Decline(id ID, err error, now time.Time) []Action {
	p := c.pending
	if c.failed || p == nil || p.id != id || p.writing {
		return nil
	}
	acts := c.abort(nil, fmt.Errorf("checkpoint %d: declined: %w", id, err), now)
	return c.maybeTrigger(acts, now)
}

// ManifestWritten reports that the manifest of checkpoint id is durable: the
// checkpoint is complete.
func (c *Coordinator) ManifestWritten(id ID, now time.Time) []Action {
	p := c.pending
	if c.failed || p == nil || p.id != id || !p.writing {
		return nil
	}
	d := now.Sub(p.ts)
	c.pending = nil
	c.lastEnd, c.ended = now, true
	c.stats.Completed++
	c.stats.ConsecutiveFailures = 0
	c.stats.LastCompleted = id
	c.stats.LastDuration = d
	acts := []Action{NotifyComplete{ID: id, Duration: d}}
	return c.maybeTrigger(acts, now)
}

// ManifestFailed reports that the manifest of checkpoint id could not be
// written: the checkpoint is aborted and counts as failed.
func (c *Coordinator) ManifestFailed(id ID, err error, now time.Time) []Action {
	p := c.pending
	if c.failed || p == nil || p.id != id || !p.writing {
		return nil
	}
	acts := c.abort(nil, fmt.Errorf("checkpoint %d: write manifest: %w", id, err), now)
	return c.maybeTrigger(acts, now)
}

// NextWake is when Tick must be called next: the in-flight checkpoint's
// timeout, or the next periodic trigger. false: no need, until an event.
func (c *Coordinator) NextWake() (time.Time, bool) {
	if c.failed {
		return time.Time{}, false
	}
	if p := c.pending; p != nil {
		if p.writing || c.cfg.Timeout == 0 {
			return time.Time{}, false
		}
		return p.ts.Add(c.cfg.Timeout), true
	}
	return c.nextTrigger()
}

// InFlight returns the checkpoint in flight, if any.
func (c *Coordinator) InFlight() (ID, bool) {
	if c.pending == nil {
		return 0, false
	}
	return c.pending.id, true
}

// Stats returns the coordinator's counters.
func (c *Coordinator) Stats() Stats {
	s := c.stats
	if c.pending != nil {
		s.InFlight = c.pending.id
	}
	return s
}

// Participants returns the operators that must ack each checkpoint, sorted.
func (c *Coordinator) Participants() []string { return slices.Clone(c.participants) }

func (c *Coordinator) isParticipant(op string) bool {
	_, ok := slices.BinarySearch(c.participants, op)
	return ok
}

func (c *Coordinator) nextTrigger() (time.Time, bool) {
	if c.cfg.Interval == 0 {
		return time.Time{}, false
	}
	t := c.lastTrigger.Add(c.cfg.Interval)
	if c.ended {
		if p := c.lastEnd.Add(c.cfg.MinPause); p.After(t) {
			t = p
		}
	}
	return t, true
}

func (c *Coordinator) maybeTrigger(acts []Action, now time.Time) []Action {
	if c.failed || c.pending != nil {
		return acts
	}
	due := c.requested
	if t, ok := c.nextTrigger(); ok && !now.Before(t) {
		due = true
	}
	if !due {
		return acts
	}
	c.requested = false
	id := c.nextID
	c.nextID++
	c.pending = &pending{id: id, ts: now, acks: make(map[string]Ack, len(c.participants))}
	c.lastTrigger = now
	c.stats.Triggered++
	acts = append(acts, Trigger{ID: id, Timestamp: now})
	return c.maybeWrite(acts) // a task without participants is done at once
}

func (c *Coordinator) maybeWrite(acts []Action) []Action {
	p := c.pending
	if len(p.acks) < len(c.participants) {
		return acts
	}
	p.writing = true
	w := WriteManifest{ID: p.id, Timestamp: p.ts, Acks: make([]Ack, 0, len(p.acks))}
	for _, op := range c.participants { // sorted
		w.Acks = append(w.Acks, p.acks[op])
	}
	return append(acts, w)
}

func (c *Coordinator) abort(acts []Action, err error, now time.Time) []Action {
	id := c.pending.id
	c.pending = nil
	c.lastEnd, c.ended = now, true
	c.stats.Failed++
	c.stats.ConsecutiveFailures++
	c.stats.LastFailure = err
	acts = append(acts, NotifyAborted{ID: id, Err: err})
	if n := c.stats.ConsecutiveFailures; n > c.cfg.TolerableFailures {
		c.failed = true
		c.requested = false
		acts = append(acts, Fail{Err: fmt.Errorf("%w: %d in a row, %d tolerated; last: %w",
			ErrTooManyFailures, n, c.cfg.TolerableFailures, err)})
	}
	return acts
}

// missing describes which participants have not acked p.
func (c *Coordinator) missing(p *pending) string {
	var miss []string
	for _, op := range c.participants {
		if _, ok := p.acks[op]; !ok {
			miss = append(miss, op)
		}
	}
	return fmt.Sprintf("acked by %d of %d participants; missing: %s",
		len(p.acks), len(c.participants), strings.Join(miss, ", "))
}
