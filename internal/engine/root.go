package engine

import (
	"context"
	"sync"
	"time"

	"github.com/weirstream/weir/checkpoint"
)

// A root is one goroutine of a task: a source, or a multi-input operator,
// with the single-input operators fused behind it. Everything a root's
// operators do happens on that goroutine, notifications and timers included;
// other goroutines reach them only through the mailbox.
type root struct {
	t         *task
	name      string
	cursor    Position
	mail      mailbox
	notifiees []notifiee
	timed     []timed
	flushers  []idleFlusher
	run       func(ctx context.Context) error
	// drain makes a source behave as if its input had ended (graceful stop).
	drain    func()
	source   bool
	finished bool
}

type notifiee interface {
	notifyComplete(id checkpoint.ID) error
	notifyAborted(id checkpoint.ID)
}

type timed interface {
	nextTimer() (time.Time, bool)
	fireTimers(now time.Time) error
}

type mailKind int

const (
	mailTrigger mailKind = iota
	mailComplete
	mailAborted
	mailFinish
	mailDrain
)

type mail struct {
	kind mailKind
	id   checkpoint.ID
}

// mailbox is an unbounded queue with a one-slot signal channel: posting
// never blocks the poster (the checkpoint driver), and a root that waits can
// select on the signal.
type mailbox struct {
	mu     sync.Mutex
	queue  []mail
	signal chan struct{}
	// wake, if set, ends the root's source Poll (see Waker).
	wake func()
}

func (m *mailbox) init() { m.signal = make(chan struct{}, 1) }

func (m *mailbox) post(x mail) {
	m.mu.Lock()
	m.queue = append(m.queue, x)
	m.mu.Unlock()
	select {
	case m.signal <- struct{}{}:
	default:
	}
	if m.wake != nil {
		m.wake()
	}
}

func (m *mailbox) take() []mail {
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.queue
	m.queue = nil
	return q
}

// serve handles the mail waiting for this root. trigger is how a source
// starts a checkpoint; multi-input roots get barriers from their inputs and
// pass nil.
func (r *root) serve(ctx context.Context, trigger func(checkpoint.ID) error) error {
	for _, m := range r.mail.take() {
		switch m.kind {
		case mailTrigger:
			if trigger != nil && !r.finished {
				if err := trigger(m.id); err != nil {
					return err
				}
			}
		case mailComplete:
			for _, n := range r.notifiees {
				if err := n.notifyComplete(m.id); err != nil {
					return err
				}
			}
		case mailAborted:
			for _, n := range r.notifiees {
				n.notifyAborted(m.id)
			}
		case mailFinish:
			r.finished = true
		case mailDrain:
			if r.drain != nil {
				r.drain()
			}
		}
	}
	return ctx.Err()
}

// nextTimer is the earliest timer of the root's operators.
func (r *root) nextTimer() (time.Time, bool) {
	if r.t.inputEnded.Load() {
		return time.Time{}, false
	}
	var next time.Time
	found := false
	for _, t := range r.timed {
		if at, ok := t.nextTimer(); ok && (!found || at.Before(next)) {
			next, found = at, true
		}
	}
	return next, found
}

func (r *root) fireTimers() error {
	if len(r.timed) == 0 || r.t.inputEnded.Load() {
		return nil
	}
	now := r.t.now()
	for _, t := range r.timed {
		if at, ok := t.nextTimer(); ok && !at.After(now) {
			if err := t.fireTimers(now); err != nil {
				return err
			}
		}
	}
	return r.flush()
}

// wait blocks until mail arrives, a timer is due or ctx ends. The signal may
// be stale (its mail already served); a spurious wake-up costs one loop.
func (r *root) wait(ctx context.Context) error {
	var due <-chan time.Time
	if at, ok := r.nextTimer(); ok {
		tm := time.NewTimer(at.Sub(r.t.now()))
		defer tm.Stop()
		due = tm.C
	}
	select {
	case <-r.mail.signal:
	case <-due:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// flush sends what the root's channel senders hold back, so that records do
// not wait for a full batch when the input is slow.
func (r *root) flush() error {
	for _, f := range r.flushers {
		if err := f.flush(); err != nil {
			return err
		}
	}
	return nil
}
