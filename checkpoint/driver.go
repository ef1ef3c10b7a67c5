package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Executor carries out a task's side of checkpoints. The Driver calls it from
// its one goroutine; no method may block for long.
type Executor interface {
	// TriggerCheckpoint starts checkpoint id (sources emit barrier id). An
	// error declines the checkpoint. Participants report back through
	// Driver.Ack or Driver.Decline, which may be called from within.
	TriggerCheckpoint(id ID, ts time.Time) error
	// NotifyComplete says checkpoint id, and so every earlier one, is durable.
	NotifyComplete(id ID)
	// NotifyAborted says checkpoint id will never complete.
	NotifyAborted(id ID, err error)
}

// DriverConfig configures a Driver.
type DriverConfig struct {
	// Coordinator is the state machine the driver runs; the driver owns it
	// from now on.
	Coordinator *Coordinator
	// Storage receives the manifests.
	Storage Storage
	Job     string
	Task    int
	// Epoch is the owner's fencing epoch, written into every manifest.
	Epoch    int64
	Executor Executor
	// Logger receives the driver's logs; nil discards them.
	Logger *slog.Logger
	// OnComplete, if set, is called with the manifest of each completed
	// checkpoint, after Executor.NotifyComplete (metrics, status page).
	OnComplete func(Manifest)
	// OnAborted, if set, is called for each aborted checkpoint, after
	// Executor.NotifyAborted.
	OnAborted func(ID, error)
	// CheckpointAtStart triggers the first checkpoint as Run starts, ahead
	// of the periodic schedule, which stays where the Coordinator put it.
	CheckpointAtStart bool
}

// Driver runs a Coordinator on one goroutine (Run): it feeds it time and
// the participants' events, carries out its actions, and writes manifests
// (inline: one small PutIfAbsent). Ack, Decline and TriggerNow may be called
// from any goroutine and never block on the driver.
type Driver struct {
	cfg     DriverConfig
	coord   *Coordinator
	log     *slog.Logger
	running atomic.Bool

	mu     sync.Mutex
	events []event
	stats  Stats

	wake chan struct{} // capacity 1: "events is not empty"

	written *Manifest // manifest of the in-flight checkpoint once durable
}

type eventKind int

const (
	evAck eventKind = iota
	evDecline
	evTriggerNow
)

type event struct {
	kind eventKind
	id   ID
	ack  Ack
	err  error
}

// NewDriver returns a driver; Run starts it. Coordinator, Storage and
// Executor are required: NewDriver panics without them.
func NewDriver(cfg DriverConfig) *Driver {
	if cfg.Coordinator == nil || cfg.Storage == nil || cfg.Executor == nil {
		panic("checkpoint.NewDriver: Coordinator, Storage and Executor are required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Driver{
		cfg:   cfg,
		coord: cfg.Coordinator,
		log:   log.With("job", cfg.Job, "task", cfg.Task),
		wake:  make(chan struct{}, 1),
		stats: cfg.Coordinator.Stats(),
	}
}

// Ack delivers a participant's acknowledgement of checkpoint id.
func (d *Driver) Ack(id ID, ack Ack) { d.post(event{kind: evAck, id: id, ack: ack}) }

// Decline reports that a participant failed checkpoint id.
func (d *Driver) Decline(id ID, err error) { d.post(event{kind: evDecline, id: id, err: err}) }

// TriggerNow requests a checkpoint as soon as none is in flight (see
// Coordinator.TriggerNow).
func (d *Driver) TriggerNow() { d.post(event{kind: evTriggerNow}) }

// Stats returns the coordinator's counters as of its last step.
func (d *Driver) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

func (d *Driver) post(e event) {
	d.mu.Lock()
	d.events = append(d.events, e)
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Run drives the coordinator until ctx is done (it returns nil then,
// abandoning a checkpoint in flight) or until more consecutive checkpoints
// failed than tolerated (it returns that error, wrapping
// ErrTooManyFailures). Run may be called once.
func (d *Driver) Run(ctx context.Context) error {
	if !d.running.CompareAndSwap(false, true) {
		return errors.New("checkpoint: Driver.Run called twice")
	}
	// A checkpoint may already be due (Interval elapsed before Run).
	first := d.coord.Tick(time.Now())
	if d.cfg.CheckpointAtStart && len(first) == 0 {
		first = d.coord.TriggerFirst(time.Now())
	}
	if err := d.apply(ctx, first); err != nil {
		return err
	}
	for {
		var timer *time.Timer
		var fire <-chan time.Time
		if at, ok := d.coord.NextWake(); ok {
			timer = time.NewTimer(time.Until(at))
			fire = timer.C
		}
		var err error
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-fire:
			err = d.apply(ctx, d.coord.Tick(time.Now()))
		case <-d.wake:
			err = d.drain(ctx)
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			d.log.Debug("checkpoint driver stopped")
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (d *Driver) drain(ctx context.Context) error {
	d.mu.Lock()
	evs := d.events
	d.events = nil
	d.mu.Unlock()
	for _, e := range evs {
		var acts []Action
		now := time.Now()
		switch e.kind {
		case evAck:
			if !d.coord.isParticipant(e.ack.Operator) {
				d.log.Warn("ack from an operator that is not a participant; ignored",
					"checkpoint", e.id, "operator", e.ack.Operator)
				continue
			}
			acts = d.coord.Ack(e.id, e.ack, now)
		case evDecline:
			d.log.Debug("checkpoint declined", "checkpoint", e.id, "err", e.err)
			acts = d.coord.Decline(e.id, e.err, now)
		case evTriggerNow:
			acts = d.coord.TriggerNow(now)
		}
		if err := d.apply(ctx, acts); err != nil {
			return err
		}
	}
	return nil
}

// apply carries out actions depth first: the outcome of an action (a
// declined trigger, a written manifest) is handled before the next action.
func (d *Driver) apply(ctx context.Context, acts []Action) error {
	defer d.snapshotStats()
	for len(acts) > 0 {
		a := acts[0]
		acts = acts[1:]
		var next []Action
		switch a := a.(type) {
		case Trigger:
			d.log.Debug("checkpoint triggered", "checkpoint", a.ID)
			if err := d.cfg.Executor.TriggerCheckpoint(a.ID, a.Timestamp); err != nil {
				next = d.coord.Decline(a.ID, fmt.Errorf("trigger: %w", err), time.Now())
			}
		case WriteManifest:
			m, err := d.writeManifest(ctx, a)
			if errors.Is(err, ErrExists) && d.newerOwner(ctx, a.ID) {
				// A newer owner wrote a checkpoint with this id: it has the
				// task, and this one is a zombie. Going on would write
				// checkpoints at an older cut with newer ids. (An id taken
				// by an older owner, a zombie, is just a failed checkpoint.)
				d.log.Error("checkpoint id taken by a newer owner: stopping", "checkpoint", a.ID)
				return fmt.Errorf("%w: checkpoint %d of task %d was written by a newer owner", ErrSuperseded, a.ID, d.cfg.Task)
			}
			if err == nil {
				err = d.checkClaims(ctx, a.ID)
				if errors.Is(err, ErrSuperseded) {
					d.log.Error("a newer owner claimed the task: stopping without committing", "checkpoint", a.ID, "err", err)
					return err
				}
			}
			if err != nil {
				next = d.coord.ManifestFailed(a.ID, err, time.Now())
			} else {
				d.written = &m
				next = d.coord.ManifestWritten(a.ID, time.Now())
			}
		case NotifyComplete:
			d.log.Info("checkpoint complete", "checkpoint", a.ID, "duration", a.Duration)
			d.cfg.Executor.NotifyComplete(a.ID)
			if m := d.written; m != nil && m.Checkpoint == a.ID && d.cfg.OnComplete != nil {
				d.cfg.OnComplete(*m)
			}
			d.written = nil
		case NotifyAborted:
			d.log.Warn("checkpoint aborted", "checkpoint", a.ID, "err", a.Err)
			d.cfg.Executor.NotifyAborted(a.ID, a.Err)
			if d.cfg.OnAborted != nil {
				d.cfg.OnAborted(a.ID, a.Err)
			}
		case Fail:
			d.log.Error("checkpointing failed", "err", a.Err)
			return a.Err
		default:
			panic(fmt.Sprintf("checkpoint: unknown action %T", a))
		}
		acts = append(next, acts...)
	}
	return nil
}

// checkClaims runs once the manifest of checkpoint id is durable and
// before anything commits its output. If a newer owner claimed the task,
// this owner is a zombie: it must not commit, and ErrSuperseded says so.
//
// Why this closes the race with the newer owner: the newer owner writes its
// claim, then lists the manifests to pick the one it restores; this owner
// writes its manifest, then lists the claims. One of the two sees the
// other's write. If the newer owner saw the manifest, it restores from it
// (and commits its transactions itself, which is idempotent); if not, this
// owner sees the claim and does not commit, and the newer owner's sinks
// abort those transactions. Either way no output is committed that the
// newer owner's restore point does not account for. A claim that cannot be
// read fails the checkpoint: its transactions are carried to the next one.
func (d *Driver) checkClaims(ctx context.Context, id ID) error {
	if t := d.coord.cfg.Timeout; t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	claims, err := Claims(ctx, d.cfg.Storage, d.cfg.Job, d.cfg.Task)
	if err != nil {
		return fmt.Errorf("checkpoint %d: read the task's claims: %w", id, err)
	}
	if n := len(claims); n > 0 && claims[n-1] > d.cfg.Epoch {
		return fmt.Errorf("%w: task %d was claimed by the owner with epoch %d after this one (%d) wrote checkpoint %d",
			ErrSuperseded, d.cfg.Task, claims[n-1], d.cfg.Epoch, id)
	}
	return nil
}

// newerOwner reports whether the manifest of checkpoint id, which exists
// although this driver did not write it, has a newer epoch than this
// owner's. An unreadable one counts as newer: stopping is the safe side.
func (d *Driver) newerOwner(ctx context.Context, id ID) bool {
	m, err := ReadManifest(ctx, d.cfg.Storage, d.cfg.Job, d.cfg.Task, id)
	return err != nil || m.Epoch > d.cfg.Epoch
}

func (d *Driver) writeManifest(ctx context.Context, w WriteManifest) (Manifest, error) {
	m := Manifest{
		Version:    FormatVersion,
		Job:        d.cfg.Job,
		Task:       d.cfg.Task,
		Checkpoint: w.ID,
		Timestamp:  w.Timestamp,
		Epoch:      d.cfg.Epoch,
		Operators:  w.Acks,
	}
	data, err := EncodeManifest(m)
	if err != nil {
		return Manifest{}, err
	}
	// The coordinator's timeout does not run while the manifest is written,
	// so bound the write by it here.
	if t := d.coord.cfg.Timeout; t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	if err := d.cfg.Storage.PutIfAbsent(ctx, ManifestName(d.cfg.Job, d.cfg.Task, w.ID), data); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

func (d *Driver) snapshotStats() {
	s := d.coord.Stats()
	d.mu.Lock()
	d.stats = s
	d.mu.Unlock()
}
