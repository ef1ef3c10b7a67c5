package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
)

// txnStore stands in for an external transactional system (Kafka): it keeps
// pre-committed transactions durably across task restarts, and only
// committed ones are visible.
type txnStore[T any] struct {
	mu      sync.Mutex
	seq     int
	pending map[string][]T
	done    map[string]bool
	// forgotten were done when forget was called: the store no longer
	// knows what became of them, as a broker that expired a
	// transactional id.
	forgotten map[string]bool
	committed []T
	// misreported are committed transactions check calls lost: as a
	// broker under KIP-890 does once another producer re-initialised the
	// transactional id (it no longer tells a commit from an abort).
	misreported map[string]bool
	// gen counts, per task, the writers opened: opening one fences the
	// older ones, as initialising a Kafka transactional id does.
	gen map[int]int
}

func newTxnStore[T any]() *txnStore[T] {
	return &txnStore[T]{pending: map[string][]T{}, done: map[string]bool{}, forgotten: map[string]bool{}, gen: map[int]int{},
		misreported: map[string]bool{}}
}

// fenced reports whether a newer writer of w's task was opened since w;
// the caller holds w.s.mu.
func (w *txnWriter[T]) fenced() error {
	if w.s.gen[w.task] != w.gen {
		return fmt.Errorf("task %d: writer fenced by a newer one", w.task)
	}
	return nil
}

func (s *txnStore[T]) visible() []T {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]T(nil), s.committed...)
}

// commit is idempotent, as resuming a committed Kafka transaction is.
func (s *txnStore[T]) commit(txn string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.commitLocked(txn)
}

func (s *txnStore[T]) commitLocked(txn string) error {
	if s.done[txn] {
		return nil
	}
	recs, ok := s.pending[txn]
	if !ok {
		return fmt.Errorf("transaction %s is lost", txn)
	}
	s.committed = append(s.committed, recs...)
	delete(s.pending, txn)
	s.done[txn] = true
	return nil
}

// check tells the runtime what became of pre-committed transactions, as
// sink.Check does for Kafka.
func (s *txnStore[T]) check(_ context.Context, cs []checkpoint.Committable) ([]engine.CommitOutcome, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]engine.CommitOutcome, len(cs))
	for i, c := range cs {
		switch _, open := s.pending[c.TransactionalID]; {
		case s.misreported[c.TransactionalID]:
			out[i] = engine.CommitLost
		case s.done[c.TransactionalID]:
			out[i] = engine.CommitDone
		case open:
			out[i] = engine.CommitResumable
		case s.forgotten[c.TransactionalID]:
			out[i] = engine.CommitUnknown
		default:
			out[i] = engine.CommitLost
		}
	}
	return out, nil
}

// forget drops the store's memory of every committed transaction.
func (s *txnStore[T]) forget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for txn := range s.done {
		s.forgotten[txn] = true
	}
	clear(s.done)
}

// abortTask drops every pending transaction of a task, as initialising a
// transactional id does.
func (s *txnStore[T]) abortTask(task int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.abortTaskLocked(task)
}

func (s *txnStore[T]) abortTaskLocked(task int) {
	prefix := fmt.Sprintf("t%d-", task)
	for txn := range s.pending {
		if strings.HasPrefix(txn, prefix) {
			delete(s.pending, txn)
		}
	}
}

type openTxn struct {
	checkpoint checkpoint.ID
	txn        string
}

type txnWriter[T any] struct {
	s    *txnStore[T]
	gen  int
	op   string
	task int
	buf  []T
	open []openTxn
}

// txnSink is a two-phase-commit sink over the store: records since the
// last barrier form a transaction, pre-committed at the barrier and
// committed when the checkpoint completes. It answers restores as
// sink.Kafka does, from the store's record.
type txnSink[T any] struct{ s *txnStore[T] }

func (s *txnStore[T]) sink() txnSink[T] { return txnSink[T]{s} }

// wrapped is the store's sink with Open replaced: a test steps in
// between the engine and the sink while restores still ask the store.
type wrapped[T any] struct {
	txnSink[T]
	open engine.SinkFactory[T]
}

func (s *txnStore[T]) sinkWith(open engine.SinkFactory[T]) wrapped[T] {
	return wrapped[T]{txnSink: s.sink(), open: open}
}

func (w wrapped[T]) Open(ctx context.Context, info engine.TaskInfo, restored []checkpoint.Committable) (engine.SinkWriter[T], error) {
	return w.open(ctx, info, restored)
}

func (k txnSink[T]) Open(_ context.Context, info engine.TaskInfo, restored []checkpoint.Committable) (engine.SinkWriter[T], error) {
	s := k.s
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range restored {
		if err := s.commitLocked(c.TransactionalID); err != nil {
			return nil, fmt.Errorf("recover committable: %w", err)
		}
	}
	s.abortTaskLocked(info.Task)
	s.gen[info.Task]++
	gen := s.gen[info.Task]
	return &txnWriter[T]{s: s, gen: gen, op: info.Operator, task: info.Task}, nil
}

func (k txnSink[T]) CheckCommittables(ctx context.Context, cs []checkpoint.Committable) ([]engine.CommitOutcome, error) {
	return k.s.check(ctx, cs)
}

// AbortCommittables drops the pending ones, as an EndTxn(abort) does.
func (k txnSink[T]) AbortCommittables(ctx context.Context, _ *slog.Logger, cs []checkpoint.Committable) ([]engine.CommitOutcome, error) {
	s := k.s
	s.mu.Lock()
	for _, c := range cs {
		delete(s.pending, c.TransactionalID)
	}
	s.mu.Unlock()
	return s.check(ctx, cs)
}

func (w *txnWriter[T]) Write(_ context.Context, v T) error {
	w.buf = append(w.buf, v)
	return nil
}

func (w *txnWriter[T]) PreCommit(_ context.Context, id checkpoint.ID) ([]checkpoint.Committable, error) {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	if err := w.fenced(); err != nil {
		return nil, err
	}
	if len(w.buf) > 0 {
		w.s.seq++
		txn := fmt.Sprintf("t%d-%d", w.task, w.s.seq)
		w.s.pending[txn] = w.buf
		w.buf = nil
		w.open = append(w.open, openTxn{id, txn})
	}
	cs := make([]checkpoint.Committable, 0, len(w.open))
	for _, o := range w.open {
		data, _ := json.Marshal(o.checkpoint)
		cs = append(cs, checkpoint.Committable{Operator: w.op, TransactionalID: o.txn, Data: data})
	}
	return cs, nil
}

func (w *txnWriter[T]) Commit(_ context.Context, id checkpoint.ID) error {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	if err := w.fenced(); err != nil {
		return err
	}
	keep := w.open[:0]
	for _, o := range w.open {
		if o.checkpoint > id {
			keep = append(keep, o)
			continue
		}
		if err := w.s.commitLocked(o.txn); err != nil {
			return err
		}
	}
	w.open = keep
	return nil
}

func (w *txnWriter[T]) Close() error { return nil }

// pendingOf counts the task's pre-committed, open transactions.
func (s *txnStore[T]) pendingOf(task int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for txn := range s.pending {
		if strings.HasPrefix(txn, fmt.Sprintf("t%d-", task)) {
			n++
		}
	}
	return n
}

// reinit re-initialises the task's transactional ids as another producer
// would: pending transactions abort, the writers are fenced, and the
// committed ones of the task are no longer told from aborted ones.
func (s *txnStore[T]) reinit(task int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.abortTaskLocked(task)
	s.gen[task]++
	prefix := fmt.Sprintf("t%d-", task)
	for txn := range s.done {
		if strings.HasPrefix(txn, prefix) {
			s.misreported[txn] = true
		}
	}
}
