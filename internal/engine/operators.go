package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/weirstream/weir/checkpoint"
)

// RecordError is the error of a user function (or a panic in one) on one
// record: it names the operator, the task and where the record came from.
type RecordError struct {
	Job      string
	Task     int
	Operator string
	Position Position
	Err      error
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("job %s task %d operator %s record %s: %v", e.Job, e.Task, e.Operator, e.Position, e.Err)
}

func (e *RecordError) Unwrap() error { return e.Err }

// ErrPanic wraps a panic recovered from a user function.
var ErrPanic = errors.New("panic")

// opBase is what every operator instance has: its name, its task and the
// cursor of the goroutine that runs it.
type opBase struct {
	t      *task
	name   string
	cursor *Position

	// late counts the records dropped for being late since lateLogged,
	// when they were last logged.
	late       int64
	lateLogged time.Time
}

// lateLogEvery bounds how often an operator logs the late records it drops.
const lateLogEvery = time.Minute

// dropLate reports the record at hand, dropped for being behind the
// operator's watermark wm (Unix ms): each to the observer (a metric), and
// in a log line, the first at once and then at most one a minute, with
// the number dropped since the last line. A late record is never dropped without a word.
func (b *opBase) dropLate(wm int64) {
	b.t.observer.LateDropped(b.t.job, b.t.id, b.name)
	b.late++
	now := b.t.now()
	if !b.lateLogged.IsZero() && now.Sub(b.lateLogged) < lateLogEvery {
		return
	}
	b.t.log.Warn("dropped records behind the watermark (late), which nothing takes",
		"operator", b.name, "dropped", b.late, "last", b.cursor.String(),
		"event_time", time.UnixMilli(b.cursor.Timestamp).UTC(), "watermark", watermarkTime(wm).UTC())
	b.late, b.lateLogged = 0, now
}

func (b *opBase) recordErr(err error) error {
	// A MisKeyedError names the record and the operator already.
	var re *RecordError
	var mk *MisKeyedError
	if errors.As(err, &re) || errors.As(err, &mk) {
		return err
	}
	return &RecordError{Job: b.t.job, Task: b.t.id, Operator: b.name, Position: *b.cursor, Err: err}
}

// recoverTo turns a panic of a user function into a RecordError in *err.
func (b *opBase) recoverTo(err *error) {
	if r := recover(); r != nil {
		if ke, ok := r.(keyEncodeError); ok {
			*err = b.recordErr(fmt.Errorf("encode the record's key: %w", ke.err))
			return
		}
		*err = b.recordErr(fmt.Errorf("%w: %v", ErrPanic, r))
	}
}

// ackStateless acknowledges barrier id for an operator without state.
func (b *opBase) ackStateless(id checkpoint.ID) {
	b.t.ack(id, checkpoint.Ack{Operator: b.name})
}

// addSingle adds a stateless single-input operator: the node, the check
// that its function is set, and per task the instance mk makes, fused into
// its input's goroutine.
func addSingle[In, Out any](in *Port[In], name string, hasFn bool, mk func(b opBase, out endpoint[Out]) endpoint[In]) *Port[Out] {
	g := in.g
	n := g.add(name, kindOperator, in.n)
	if !hasFn {
		g.errorf("operator %q: function is nil", name)
	}
	out := newPort[Out](g, n)
	connect(in, n, 0)
	n.build = func(t *task) error {
		t.setEndpoints(n, mk(t.base(n), out.output(t)))
		return nil
	}
	return out
}

// --- Map ------------------------------------------------------------------

type mapOp[In, Out any] struct {
	opBase
	fn  func(In) (Out, error)
	out endpoint[Out]
	buf []Out
}

func (m *mapOp[In, Out]) apply(v In) (out Out, err error) {
	defer m.recoverTo(&err)
	out, err = m.fn(v)
	if err != nil {
		err = m.recordErr(err)
	}
	return out, err
}

func (m *mapOp[In, Out]) collect(v In) error {
	out, err := m.apply(v)
	if err != nil {
		return err
	}
	return m.out.collect(out)
}

func (m *mapOp[In, Out]) collectBatch(vals []In, pos []Position) error {
	m.buf = m.buf[:0]
	for i, v := range vals {
		*m.cursor = pos[i]
		out, err := m.apply(v)
		if err != nil {
			return err
		}
		m.buf = append(m.buf, out)
	}
	err := m.out.collectBatch(m.buf, pos)
	clear(m.buf) // let the GC have what downstream did not keep
	return err
}

func (m *mapOp[In, Out]) watermark(w wmark) error { return m.out.watermark(w) }

func (m *mapOp[In, Out]) barrier(id checkpoint.ID) error {
	m.ackStateless(id)
	return m.out.barrier(id)
}

func (m *mapOp[In, Out]) end() error { return m.out.end() }

// Map adds an operator that applies fn to every record.
func Map[In, Out any](in *Port[In], name string, fn func(In) (Out, error)) *Port[Out] {
	return addSingle(in, name, fn != nil, func(b opBase, out endpoint[Out]) endpoint[In] {
		return &mapOp[In, Out]{opBase: b, fn: fn, out: out}
	})
}

// --- Filter ---------------------------------------------------------------

type filterOp[T any] struct {
	opBase
	fn   func(T) (bool, error)
	out  endpoint[T]
	buf  []T
	kept []Position
}

func (f *filterOp[T]) apply(v T) (keep bool, err error) {
	defer f.recoverTo(&err)
	keep, err = f.fn(v)
	if err != nil {
		err = f.recordErr(err)
	}
	return keep, err
}

func (f *filterOp[T]) collect(v T) error {
	keep, err := f.apply(v)
	if err != nil || !keep {
		return err
	}
	return f.out.collect(v)
}

func (f *filterOp[T]) collectBatch(vals []T, pos []Position) error {
	f.buf, f.kept = f.buf[:0], f.kept[:0]
	for i, v := range vals {
		*f.cursor = pos[i]
		keep, err := f.apply(v)
		if err != nil {
			return err
		}
		if keep {
			f.buf = append(f.buf, v)
			f.kept = append(f.kept, pos[i])
		}
	}
	err := f.out.collectBatch(f.buf, f.kept)
	clear(f.buf)
	return err
}

func (f *filterOp[T]) watermark(w wmark) error { return f.out.watermark(w) }

func (f *filterOp[T]) barrier(id checkpoint.ID) error {
	f.ackStateless(id)
	return f.out.barrier(id)
}

func (f *filterOp[T]) end() error { return f.out.end() }

// Filter adds an operator that keeps the records for which fn is true.
func Filter[T any](in *Port[T], name string, fn func(T) (bool, error)) *Port[T] {
	return addSingle(in, name, fn != nil, func(b opBase, out endpoint[T]) endpoint[T] {
		return &filterOp[T]{opBase: b, fn: fn, out: out}
	})
}

// --- FlatMap --------------------------------------------------------------

// Emitter passes the records a function emits downstream. It is valid only
// during the call it was given to.
type Emitter[T any] struct {
	out endpoint[T]
	err error
}

// Emit sends v downstream. After an error, further emits are ignored and the
// error is what the operator fails with.
func (e *Emitter[T]) Emit(v T) error {
	if e.err != nil {
		return e.err
	}
	e.err = e.out.collect(v)
	return e.err
}

type flatMapOp[In, Out any] struct {
	opBase
	fn  func(In, *Emitter[Out]) error
	em  Emitter[Out]
	out endpoint[Out]
}

func (f *flatMapOp[In, Out]) apply(v In) (err error) {
	defer f.recoverTo(&err)
	return f.fn(v, &f.em)
}

func (f *flatMapOp[In, Out]) collect(v In) error {
	f.em = Emitter[Out]{out: f.out}
	err := f.apply(v)
	if f.em.err != nil {
		return f.em.err // downstream failed: its error names its operator
	}
	if err != nil {
		return f.recordErr(err)
	}
	return nil
}

func (f *flatMapOp[In, Out]) collectBatch(vals []In, pos []Position) error {
	return eachRecord(f.cursor, f.collect, vals, pos)
}

func (f *flatMapOp[In, Out]) watermark(w wmark) error { return f.out.watermark(w) }

func (f *flatMapOp[In, Out]) barrier(id checkpoint.ID) error {
	f.ackStateless(id)
	return f.out.barrier(id)
}

func (f *flatMapOp[In, Out]) end() error { return f.out.end() }

// FlatMap adds an operator that emits any number of records per record.
func FlatMap[In, Out any](in *Port[In], name string, fn func(In, *Emitter[Out]) error) *Port[Out] {
	return addSingle(in, name, fn != nil, func(b opBase, out endpoint[Out]) endpoint[In] {
		return &flatMapOp[In, Out]{opBase: b, fn: fn, out: out}
	})
}

// --- Sink -----------------------------------------------------------------

type sinkOp[T any] struct {
	opBase
	ctx    context.Context
	writer SinkWriter[T]
	timed  TimestampWriter[T] // the writer, if it takes event times
	// commits tells checkpoint storage what the writer committed.
	commits commitLog
}

func (s *sinkOp[T]) write(v T) (err error) {
	defer s.recoverTo(&err)
	if s.timed != nil {
		return s.timed.WriteAt(s.ctx, v, s.cursor.Timestamp)
	}
	return s.writer.Write(s.ctx, v)
}

func (s *sinkOp[T]) collect(v T) error {
	if err := s.write(v); err != nil {
		return s.recordErr(err)
	}
	return nil
}

func (s *sinkOp[T]) collectBatch(vals []T, pos []Position) error {
	return eachRecord(s.cursor, s.collect, vals, pos)
}

// watermark ends at the sink, unless its writer takes watermarks (a
// repartition topic's, which carries them to the tasks downstream).
func (s *sinkOp[T]) watermark(w wmark) error {
	if ww, ok := s.writer.(WatermarkWriter); ok {
		ww.Watermark(Watermark{Millis: w.ts, Idle: w.idle})
	}
	return nil
}

func (s *sinkOp[T]) barrier(id checkpoint.ID) error {
	cs, err := s.writer.PreCommit(s.ctx, id)
	if err != nil {
		// What failed to pre-commit cannot be trusted to commit later: fail
		// the task, which restarts from the last checkpoint and writes it again.
		return fmt.Errorf("operator %s: pre-commit checkpoint %d: %w", s.name, id, err)
	}
	s.t.ack(id, checkpoint.Ack{Operator: s.name, Committables: cs, Committed: s.commits.barrier(id, cs)})
	return nil
}

func (s *sinkOp[T]) end() error { return nil }

func (s *sinkOp[T]) notifyComplete(id checkpoint.ID) error {
	if err := s.writer.Commit(s.ctx, id); err != nil {
		return fmt.Errorf("operator %s: commit checkpoint %d: %w", s.name, id, err)
	}
	s.commits.completed(id)
	return nil
}

// committedUnrecorded implements committer.
func (s *sinkOp[T]) committedUnrecorded() []checkpoint.Committable { return s.commits.pending() }

func (s *sinkOp[T]) notifyAborted(checkpoint.ID) {}

func (s *sinkOp[T]) close() error { return s.writer.Close() }

// Sink adds a sink that writes every record with the writers sink opens,
// one per task. If sink is a Committer, restores ask it about the
// committables of its writers.
func Sink[T any](in *Port[T], name string, sink SinkOpener[T]) {
	g := in.g
	n := g.add(name, kindSink, in.n)
	if sink == nil {
		g.errorf("sink %q: sink is nil", name)
	}
	if c, ok := sink.(Committer); ok {
		g.committers[name] = c
	}
	connect(in, n, 0)
	n.build = func(t *task) error {
		op := &sinkOp[T]{opBase: t.base(n), ctx: t.ctx}
		t.setEndpoints(n, op)
		t.addNotifiee(n, op)
		t.committers = append(t.committers, op)
		// The writer opens, resuming the restored committables, only once
		// every operator's state restored: a checkpoint whose state turns
		// out unusable can then still be walked back past, its transactions
		// not committed by this attempt.
		t.addOpener(func() error {
			var restored []checkpoint.Committable
			if a := t.restoredAck(n.name); a != nil {
				restored = a.Committables
			}
			w, err := sink.Open(t.ctx, t.info(n.name), restored)
			if err != nil {
				return fmt.Errorf("open sink %s: %w", n.name, err)
			}
			op.writer = w
			op.timed, _ = w.(TimestampWriter[T])
			op.commits.restored(restored) // the factory committed them
			t.addCloser(op.close)
			return nil
		})
		return nil
	}
}

// --- WithEventTime --------------------------------------------------------

// Timed is a record with its event time, for code that does not see the
// record's Position: a sink that writes the time into Kafka records, which
// a source reads back as their event time.
type Timed[T any] struct {
	Value T
	Time  time.Time
}

type timedOp[T any] struct {
	opBase
	out endpoint[Timed[T]]
}

func (o *timedOp[T]) collect(v T) error {
	return o.out.collect(Timed[T]{Value: v, Time: time.UnixMilli(o.cursor.Timestamp)})
}

func (o *timedOp[T]) collectBatch(vals []T, pos []Position) error {
	return eachRecord(o.cursor, o.collect, vals, pos)
}

func (o *timedOp[T]) watermark(w wmark) error { return o.out.watermark(w) }

func (o *timedOp[T]) barrier(id checkpoint.ID) error {
	o.ackStateless(id)
	return o.out.barrier(id)
}

func (o *timedOp[T]) end() error { return o.out.end() }

// WithEventTime pairs each record with its event time.
func WithEventTime[T any](in *Port[T], name string) *Port[Timed[T]] {
	return addSingle(in, name, true, func(b opBase, out endpoint[Timed[T]]) endpoint[T] {
		return &timedOp[T]{opBase: b, out: out}
	})
}
