package engine

import (
	"context"

	"github.com/weirstream/weir/checkpoint"
)

// endpoint is where a producer's records and control events go: the input of
// a fused downstream operator (a direct call) or the sending end of a channel
// to a multi-input operator. Records, barriers and the end of input travel in
// one order through it.
type endpoint[T any] interface {
	collect(v T) error
	// collectBatch takes several records at once; pos[i] is where vals[i]
	// came from. The slices are the caller's: they are valid only during
	// the call.
	collectBatch(vals []T, pos []Position) error
	barrier(id checkpoint.ID) error
	// watermark passes event-time progress downstream (see wmark).
	watermark(w wmark) error
	end() error
}

type fanout[T any] []endpoint[T]

func (f fanout[T]) collect(v T) error {
	for _, e := range f {
		if err := e.collect(v); err != nil {
			return err
		}
	}
	return nil
}

func (f fanout[T]) collectBatch(vals []T, pos []Position) error {
	for _, e := range f {
		if err := e.collectBatch(vals, pos); err != nil {
			return err
		}
	}
	return nil
}

func (f fanout[T]) barrier(id checkpoint.ID) error {
	for _, e := range f {
		if err := e.barrier(id); err != nil {
			return err
		}
	}
	return nil
}

func (f fanout[T]) watermark(w wmark) error {
	for _, e := range f {
		if err := e.watermark(w); err != nil {
			return err
		}
	}
	return nil
}

func (f fanout[T]) end() error {
	for _, e := range f {
		if err := e.end(); err != nil {
			return err
		}
	}
	return nil
}

type discard[T any] struct{}

func (discard[T]) collect(T) error                    { return nil }
func (discard[T]) collectBatch([]T, []Position) error { return nil }
func (discard[T]) barrier(checkpoint.ID) error        { return nil }
func (discard[T]) watermark(wmark) error              { return nil }
func (discard[T]) end() error                         { return nil }

// message is one send on a channel between goroutines of a task: a batch of
// records, or one control event. Records travel in batches so that a channel
// operation is paid per batch, not per record.
type message[T any] struct {
	values    []T
	positions []Position
	barrier   checkpoint.ID // non-zero: a barrier
	wm        *wmark        // a watermark
	end       bool
}

// DefaultBatchSize is how many records a channel sender gathers before it
// sends, unless Config.BatchSize says otherwise.
const DefaultBatchSize = 512

// DefaultChannelCapacity bounds each channel in batches unless
// Config.ChannelCapacity says otherwise: a full channel blocks the sender,
// which is how backpressure travels upstream.
const DefaultChannelCapacity = 4

// sender is the endpoint of a channel to a multi-input operator. It lives in
// the producer's goroutine; the position of each record is read from that
// goroutine's cursor.
type sender[T any] struct {
	ctx    context.Context
	ch     chan *message[T]
	cursor *Position
	cur    *message[T]
	batch  int
}

func newSender[T any](ctx context.Context, ch chan *message[T], cursor *Position, batch int) *sender[T] {
	return &sender[T]{ctx: ctx, ch: ch, cursor: cursor, batch: batch}
}

func (s *sender[T]) collect(v T) error {
	if s.cur == nil {
		s.cur = &message[T]{values: make([]T, 0, s.batch), positions: make([]Position, 0, s.batch)}
	}
	s.cur.values = append(s.cur.values, v)
	s.cur.positions = append(s.cur.positions, *s.cursor)
	if len(s.cur.values) == s.batch {
		return s.flush()
	}
	return nil
}

func (s *sender[T]) collectBatch(vals []T, pos []Position) error {
	for i, v := range vals {
		*s.cursor = pos[i]
		if err := s.collect(v); err != nil {
			return err
		}
	}
	return nil
}

// eachRecord feeds a batch to a per-record collect, keeping the cursor on
// the record at hand: the batch path of operators that gain nothing from
// seeing a batch whole.
func eachRecord[T any](cursor *Position, collect func(T) error, vals []T, pos []Position) error {
	for i, v := range vals {
		*cursor = pos[i]
		if err := collect(v); err != nil {
			return err
		}
	}
	return nil
}

func (s *sender[T]) flush() error {
	if s.cur == nil {
		return nil
	}
	m := s.cur
	s.cur = nil
	return s.send(m)
}

func (s *sender[T]) send(m *message[T]) error {
	select {
	case s.ch <- m:
		return nil
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
}

func (s *sender[T]) barrier(id checkpoint.ID) error {
	if err := s.flush(); err != nil {
		return err
	}
	return s.send(&message[T]{barrier: id})
}

func (s *sender[T]) watermark(w wmark) error {
	if err := s.flush(); err != nil {
		return err
	}
	return s.send(&message[T]{wm: &w})
}

func (s *sender[T]) end() error {
	if err := s.flush(); err != nil {
		return err
	}
	return s.send(&message[T]{end: true})
}

// idleFlusher is implemented by endpoints that hold records back; a
// goroutine flushes them when it has nothing else to do, so that a slow
// stream is not held up waiting for a full batch.
type idleFlusher interface{ flush() error }
