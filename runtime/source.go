package runtime

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
	switch {
	case errors.Is(err, ErrEndOfInput):
		s.end()
	case err != nil:
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("source %s: %w", s.name, err)
	}
	if s.batch.Len() > 0 {
		if !s.t.firstRecord.Load() {
			s.t.recordsFlowing()
		}
		if err := s.out.collectBatch(s.batch.Values, s.batch.Positions); err != nil {
			return err
		}
	}
	return s.r.flush()
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
	s.t.ack(id, checkpoint.Ack{Operator: s.name, Sources: s.reader.Positions()})
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
	n := g.add(name, kindSource)
	if factory == nil {
		g.errorf("source %q: factory is nil", name)
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
		r.run = s.run
		r.drain = s.end
		r.source = true
		return nil
	}
	return out
}
