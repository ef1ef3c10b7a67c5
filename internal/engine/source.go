package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/weirstream/weir/checkpoint"
)

// sourceRoot runs one source of a task and the operators fused behind it, in
// one goroutine. Between polls it serves its mailbox: triggers become
// barriers, completions reach the operators, timers fire.
type sourceRoot[T any] struct {
	opBase
	r      *root
	reader SourceReader[T]
	out    endpoint[T]
	batch  Batch[T]
	ended  bool
	// wm derives watermarks, if the source has a strategy; tsFn extracts
	// timestamps, if the strategy says how.
	wm   *watermarkGen
	tsFn func(T, Position) time.Time
	// polled is when the last Poll returned: a split's idleness is judged
	// then, by the records that Poll had a chance to return, also after a
	// batch that took long to process (a slow operator, a full channel
	// downstream, a wait for a transaction slot). Judged after such a
	// batch, every split went idle before the next poll could hand over
	// what came in meanwhile: the source told its consumers it was idle,
	// and a two-input operator after it let its other input run ahead
	// (the kind of fault Flink's FLINK-35886 fixed). One clock read per
	// poll, none per record.
	polled time.Time
}

func (s *sourceRoot[T]) run(ctx context.Context) error {
	for {
		if err := s.r.serve(ctx, s.trigger); err != nil {
			return err
		}
		if s.r.finished {
			return s.out.end()
		}
		if err := s.r.fireTimers(); err != nil {
			return err
		}
		if s.ended {
			// The input is exhausted; the task takes a final checkpoint and
			// then tells this root to finish. Until then only mail matters.
			if err := s.r.wait(ctx); err != nil {
				return err
			}
			continue
		}
		if err := s.poll(ctx); err != nil {
			return err
		}
	}
}

func (s *sourceRoot[T]) poll(ctx context.Context) error {
	s.batch.reset()
	err := s.reader.Poll(ctx, &s.batch)
	if s.wm != nil {
		s.polled = s.t.now()
	}
	ended := errors.Is(err, ErrEndOfInput)
	if err != nil && !ended {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("source %s: %w", s.name, err)
	}
	if s.batch.Len() > 0 {
		if !s.t.firstRecord.Load() {
			s.t.recordsFlowing()
		}
		if s.wm != nil {
			// A restored source's watermark goes first: the records after
			// the checkpoint must meet the event time they met before.
			var first wmark
			var ok bool
			switch {
			case s.wm.carried != nil:
				// Not the splits' own yet: this batch's records came
				// before the watermarks the reader has taken in.
				first, ok = s.wm.restored()
			case !s.wm.sent:
				// From the restored splits' highest timestamps, before
				// this batch's.
				first, ok = s.wm.advance(s.polled)
			}
			if ok {
				if err := s.out.watermark(first); err != nil {
					return err
				}
			}
			if err := s.stamp(); err != nil {
				return err
			}
		}
		if err := s.out.collectBatch(s.batch.Values, s.batch.Positions); err != nil {
			return err
		}
	}
	switch {
	case ended:
		// Every event-time timer downstream is due: the input is complete.
		if err := s.out.watermark(wmark{ts: endOfTime}); err != nil {
			return err
		}
		s.end()
	case s.wm != nil:
		if w, ok := s.wm.advance(s.polled); ok {
			if err := s.out.watermark(w); err != nil {
				return err
			}
		}
	}
	return s.r.flush()
}

// stamp gives the batch's records their event time, if the strategy
// extracts it, and takes it into each split's watermark. A panic of the
// strategy's function fails the record (the task), as one of any other
// function of the job does, not the process.
func (s *sourceRoot[T]) stamp() (err error) {
	i := 0
	defer func() {
		if r := recover(); r != nil {
			*s.cursor = s.batch.Positions[i]
			err = s.recordErr(fmt.Errorf("%w: the watermark strategy's Timestamp: %v", ErrPanic, r))
		}
	}()
	for i = range s.batch.Positions {
		p := &s.batch.Positions[i]
		if s.tsFn != nil {
			p.Timestamp = s.tsFn(s.batch.Values[i], *p).UnixMilli()
		}
		if s.wm.carried == nil {
			s.wm.observe(p, s.polled)
		}
	}
	return nil
}

// end stops reading: the input is exhausted, or the job drains.
func (s *sourceRoot[T]) end() {
	if !s.ended {
		s.ended = true
		s.t.sourceEnded(s.name)
	}
}

// trigger starts checkpoint id at this source: its positions are the next
// records it would emit, and everything it emitted before goes before the
// barrier.
func (s *sourceRoot[T]) trigger(id checkpoint.ID) error {
	start := time.Now()
	positions := s.reader.Positions()
	a := checkpoint.Ack{Operator: s.name, Sources: positions}
	if s.wm != nil {
		s.wm.annotate(positions)
		if s.wm.out.ts != noWatermark {
			wm := s.wm.out.ts
			a.Watermark = &wm
		}
	}
	s.t.ack(id, a)
	if err := s.out.barrier(id); err != nil {
		return err
	}
	if err := s.r.flush(); err != nil {
		return err
	}
	s.t.observer.BarrierPause(s.t.job, s.t.id, id, time.Since(start))
	return nil
}

// Source adds a source whose readers factory opens, one per task.
func Source[T any](g *Graph, name string, factory SourceFactory[T]) *Port[T] {
	return SourceWithWatermarks(g, name, factory, nil)
}

// SourceWithWatermarks adds a source that derives watermarks from its
// records' timestamps as strategy says (nil: none, as Source).
func SourceWithWatermarks[T any](g *Graph, name string, factory SourceFactory[T], strategy *WatermarkStrategy[T]) *Port[T] {
	n := g.add(name, kindSource)
	if factory == nil {
		g.errorf("source %q: factory is nil", name)
	}
	if strategy != nil && (strategy.OutOfOrderness < 0 || strategy.Idleness < 0) {
		g.errorf("source %q: watermark out-of-orderness and idleness must not be negative", name)
	}
	out := newPort[T](g, n)
	n.build = func(t *task) error {
		var restored []checkpoint.SourcePosition
		if a := t.restoredAck(n.name); a != nil {
			restored = a.Sources
		}
		reader, err := factory(t.ctx, t.info(n.name), restored)
		if err != nil {
			return fmt.Errorf("open source %s: %w", n.name, err)
		}
		t.addCloser(reader.Close)
		r := t.rootOf(n)
		s := &sourceRoot[T]{opBase: t.base(n), r: r, reader: reader, out: out.output(t)}
		if w, ok := reader.(Waker); ok {
			r.mail.wake = w.Wake
		}
		if wr, ok := reader.(WatermarkReader); ok {
			if strategy != nil {
				return fmt.Errorf("source %s: its splits carry their watermarks; it takes no watermark strategy", n.name)
			}
			s.wm = newWatermarkGen(0, 0, reader.Positions(), t.now())
			s.wm.carried = wr
			if a := t.restoredAck(n.name); a != nil && a.Watermark != nil {
				s.wm.out = wmark{ts: *a.Watermark}
			}
		} else if strategy != nil {
			// The reader's splits, each resuming its highest timestamp
			// from the checkpoint, if it has one.
			splits := reader.Positions()
			for i := range splits {
				for _, r := range restored {
					if r.Topic == splits[i].Topic && r.Partition == splits[i].Partition {
						splits[i].MaxTimestamp = r.MaxTimestamp
					}
				}
			}
			s.wm = newWatermarkGen(strategy.OutOfOrderness, strategy.Idleness, splits, t.now())
			if a := t.restoredAck(n.name); a != nil && a.Watermark != nil {
				// Sent first, before the records after the checkpoint.
				s.wm.out = wmark{ts: *a.Watermark}
			}
			s.tsFn = strategy.Timestamp
		}
		r.run = s.run
		r.drain = s.end
		r.source = true
		return nil
	}
	return out
}
