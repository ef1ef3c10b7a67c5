package runtime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/runtime"
)

// txnStore stands in for an external transactional system (Kafka): it keeps
// pre-committed transactions durably across task restarts, and only
// committed ones are visible.
type txnStore[T any] struct {
	mu        sync.Mutex
	seq       int
	pending   map[string][]T
	done      map[string]bool
	committed []T
}

func newTxnStore[T any]() *txnStore[T] {
	return &txnStore[T]{pending: map[string][]T{}, done: map[string]bool{}}
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
func (s *txnStore[T]) check(_ context.Context, cs []checkpoint.Committable) ([]runtime.CommitOutcome, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]runtime.CommitOutcome, len(cs))
	for i, c := range cs {
		switch _, open := s.pending[c.TransactionalID]; {
		case s.done[c.TransactionalID]:
			out[i] = runtime.CommitDone
		case open:
			out[i] = runtime.CommitResumable
		default:
			out[i] = runtime.CommitLost
		}
	}
	return out, nil
}

// abortTask drops every pending transaction of a task, as initialising a
// transactional id does.
func (s *txnStore[T]) abortTask(task int) {
	s.mu.Lock()
	defer s.mu.Unlock()
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
	op   string
	task int
	buf  []T
	open []openTxn
}

// sink is a two-phase-commit sink over the store: records since the last
// barrier form a transaction, pre-committed at the barrier and committed
// when the checkpoint completes.
func (s *txnStore[T]) sink() runtime.SinkFactory[T] {
	return func(_ context.Context, info runtime.TaskInfo, restored []checkpoint.Committable) (runtime.SinkWriter[T], error) {
		for _, c := range restored {
			if err := s.commit(c.TransactionalID); err != nil {
				return nil, fmt.Errorf("recover committable: %w", err)
			}
		}
		s.abortTask(info.Task)
		return &txnWriter[T]{s: s, op: info.Operator, task: info.Task}, nil
	}
}

func (w *txnWriter[T]) Write(_ context.Context, v T) error {
	w.buf = append(w.buf, v)
	return nil
}

func (w *txnWriter[T]) PreCommit(_ context.Context, id checkpoint.ID) ([]checkpoint.Committable, error) {
	if len(w.buf) > 0 {
		w.s.mu.Lock()
		w.s.seq++
		txn := fmt.Sprintf("t%d-%d", w.task, w.s.seq)
		w.s.pending[txn] = w.buf
		w.s.mu.Unlock()
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
	keep := w.open[:0]
	for _, o := range w.open {
		if o.checkpoint > id {
			keep = append(keep, o)
			continue
		}
		if err := w.s.commit(o.txn); err != nil {
			return err
		}
	}
	w.open = keep
	return nil
}

func (w *txnWriter[T]) Close() error { return nil }
