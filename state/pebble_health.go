package state

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// What Pebble does when the disk fails it (v2.1.7):
//
//   - A flush or compaction that cannot write its SST reports a background
//     error and leaves the DB as it was; a flush is retried at once, again
//     and again, until it succeeds or the DB closes. Meanwhile the
//     memtables it could not flush stay queued, and once they hold
//     MemTableStopWritesThreshold memtables' worth, writes stall until a
//     flush succeeds.
//   - A failed write of the MANIFEST (after a flush or compaction wrote its
//     SST, or rotating it) is fatal: Pebble calls Logger.Fatalf, whose
//     default exits the process, because its in-memory state may no longer
//     match the files. So is data it finds corrupt. Fatalf runs on whatever
//     goroutine hit the error, often Pebble's own flush or compaction
//     goroutine.
//   - A failed WAL write (PebbleCutWAL only: the flush cut, the worker's,
//     runs without a WAL) panics in the writer's goroutine with Pebble's
//     commit lock held: the task's recover turns it into a failure, but the
//     DB can no longer be closed. Use the WAL cut only where the disk does
//     not fill up.
//
// So Fatalf here neither exits nor panics (a panic on Pebble's goroutine
// would end the process as surely): it marks the DB broken and returns, and
// every later read, write and snapshot of the store fails with that error.
// The task then fails and restarts from its last checkpoint into a fresh
// DB; the broken one is never snapshotted, so what Pebble did after the
// fatal error cannot reach a checkpoint. A flush that fails fails the
// snapshot waiting for it (the checkpoint fails, the task goes on), and
// writes fail rather than stall once the memtables pile up.

// ErrBroken is wrapped by the errors of a Pebble store that Pebble reported
// a fatal error for (a failed MANIFEST or WAL write, corruption): its state
// on disk and in memory may no longer agree, so it is not used again. The
// task that owns it fails and restores its last checkpoint.
var ErrBroken = errors.New("state: pebble: store broken by a fatal Pebble error")

// dbHealth is what Pebble reported of one DB: the fatal error that broke it,
// and whether its flushes fail.
type dbHealth struct {
	log *slog.Logger

	// troubled is set once fatal is, or while flushes fail: the cheap
	// check on every read and write.
	troubled atomic.Bool
	fatal    atomic.Pointer[error]

	mu sync.Mutex
	// flushErr is the error of the last flush, nil once one succeeded.
	flushErr error
	// createErr is the error of the last file Pebble failed to create, nil
	// once a flush succeeded: the first sign of a failing flush, before it
	// ends.
	createErr error
	// flushEnd is closed, and replaced, each time a flush ends.
	flushEnd chan struct{}
	// Background errors repeat as fast as Pebble retries its flush: they
	// are logged at most every backgroundLogEvery, with a count.
	loggedAt   time.Time
	suppressed int
}

const backgroundLogEvery = 10 * time.Second

func newDBHealth(log *slog.Logger) *dbHealth {
	return &dbHealth{log: log, flushEnd: make(chan struct{})}
}

// err is the error that broke the DB, nil if none.
func (h *dbHealth) err() error {
	if p := h.fatal.Load(); p != nil {
		return *p
	}
	return nil
}

// flushState returns a channel closed when the next flush ends, and the
// error of the last flush if it failed.
func (h *dbHealth) flushState() (<-chan struct{}, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.flushEnd, h.flushErr
}

// writeErr is the error of the last flush if it failed, else that of a
// file create since the last flush that succeeded.
func (h *dbHealth) writeErr() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.flushErr != nil {
		return h.flushErr
	}
	return h.createErr
}

// createFailed records that Pebble failed to create a file.
func (h *dbHealth) createFailed(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.createErr = err
	h.troubled.Store(true)
}

// listener returns the event listener of the DB. Pebble calls it with its
// own mutex held: it must not block.
func (h *dbHealth) listener() *pebble.EventListener {
	return &pebble.EventListener{
		BackgroundError: h.backgroundError,
		FlushEnd: func(info pebble.FlushInfo) {
			// An empty flush reports "pebble: empty table" as its error.
			failed := info.Err != nil && info.Err.Error() != "pebble: empty table"
			h.mu.Lock()
			defer h.mu.Unlock()
			close(h.flushEnd)
			h.flushEnd = make(chan struct{})
			if failed {
				h.flushErr = info.Err
				h.troubled.Store(true)
			} else if h.flushErr != nil || h.createErr != nil {
				h.flushErr, h.createErr = nil, nil
				h.troubled.Store(h.fatal.Load() != nil)
				h.log.Info("pebble: flushes succeed again")
			}
		},
	}
}

func (h *dbHealth) backgroundError(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if now := time.Now(); now.Sub(h.loggedAt) >= backgroundLogEvery {
		h.log.Error("pebble: background error", "err", err, "component", "pebble", "repeats_not_logged", h.suppressed)
		h.loggedAt, h.suppressed = now, 0
		return
	}
	h.suppressed++
}

// pebbleLogger passes Pebble's messages to slog; Fatalf breaks the DB.
type pebbleLogger struct {
	l *slog.Logger
	h *dbHealth
}

func (l pebbleLogger) Infof(format string, args ...any) {
	l.l.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}

func (l pebbleLogger) Errorf(format string, args ...any) {
	l.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

// Fatalf marks the DB broken and returns: see the top of this file. Pebble
// goes on after it returns (its code allows for loggers that do), so the
// DB may still serve calls in flight; the store refuses every later one.
// The error is kept wrapped when Pebble passed one, so that callers can
// tell a full disk (syscall.ENOSPC) from other faults.
func (l pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	var err error
	for _, a := range args {
		if e, ok := a.(error); ok {
			err = fmt.Errorf("%w: %w", ErrBroken, e)
			break
		}
	}
	if err == nil {
		err = fmt.Errorf("%w: %s", ErrBroken, msg)
	}
	l.h.breakWith(err)
}

// memTableStopWrites is the store's MemTableStopWritesThreshold: Pebble
// stalls writes once its queued memtables hold this many memtables' worth.
const memTableStopWrites = 4

// checkRoom returns the error that broke the DB, if any. While flushes fail
// it also checks that the queued memtables leave room for extra more bytes
// (and a memtable of margin) before Pebble would stall writes: a stall
// lasts until a flush succeeds, and a task stalled in a write cannot fail
// or stop. Past that room the store breaks instead, and the task fails and
// restores its last checkpoint. Asking Pebble for its memtables costs some
// microseconds a call, paid only while flushes fail.
func (p *Pebble) checkRoom(extra int64) error {
	h := p.health
	if err := h.err(); err != nil {
		return err
	}
	flushErr := h.writeErr()
	if flushErr == nil {
		return nil
	}
	size := int64(p.db.Metrics().MemTable.Size)
	if size+extra < (memTableStopWrites-1)*p.opts.MemTableSize {
		return nil
	}
	err := fmt.Errorf("%w: flushes fail (%w) and the memtables hold %d bytes (%d more to write), near the %d at which Pebble would stall the task until a flush succeeds",
		ErrBroken, flushErr, size, extra, memTableStopWrites*p.opts.MemTableSize)
	h.breakWith(err)
	return err
}

// breakWith marks the DB broken by err, unless something broke it first.
func (h *dbHealth) breakWith(err error) {
	if h.fatal.CompareAndSwap(nil, &err) {
		h.troubled.Store(true)
		h.log.Error("pebble: the store is broken, its task must restore its last checkpoint", "err", err, "component", "pebble")
	}
}
