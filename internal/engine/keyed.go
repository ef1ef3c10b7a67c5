package engine

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/state"
)

// Keyed is a stream partitioned by a key: keyed operators downstream of it
// see state scoped to the key of the record at hand. Within a task every key
// is local; across tasks, keys follow the partitioning of the input (for
// Kafka, the record key's partition).
type Keyed[K, T any] struct {
	in    *Port[T]
	name  string
	keyFn func(T) K
	codec state.Codec[K]
	// local: the keys are the task's own (LocalKeyBy), not checked.
	local bool
}

// KeyBy declares how to key a stream. It adds no operator and moves no
// record: it declares that the input is partitioned by the key, the key's
// codec bytes being the record key the input's producers partitioned by.
// With Config.Partitions set, the keyed operator that consumes it checks
// that declaration on every record (see MisKeyedError).
func KeyBy[K, T any](in *Port[T], name string, keyFn func(T) K, codec state.Codec[K]) *Keyed[K, T] {
	if keyFn == nil {
		in.g.errorf("keyBy %q: key function is nil", name)
	}
	if codec == nil {
		in.g.errorf("keyBy %q: key codec is nil", name)
	}
	in.g.keyBys++
	return &Keyed[K, T]{in: in, name: name, keyFn: keyFn, codec: checkedKeys(codec)}
}

// checkedKeys returns c, or, when its encoding can fail (a
// state.CheckedCodec: JSON of a NaN, say), c with an Append that panics
// with a keyEncodeError instead of appending what it would (JSON's
// "null"): distinct keys that fail alike would share one state. The
// operators' recoverTo turns the panic into the record's error, so that
// the hot path of every key keeps its one Append call.
func checkedKeys[K any](c state.Codec[K]) state.Codec[K] {
	if cc, ok := c.(state.CheckedCodec[K]); ok {
		return checkedKeyCodec[K]{cc}
	}
	return c
}

type checkedKeyCodec[K any] struct{ state.CheckedCodec[K] }

// CodecName is the name of the codec checked: its bytes.
func (c checkedKeyCodec[K]) CodecName() string { return state.CodecName(c.CheckedCodec) }

func (c checkedKeyCodec[K]) Append(dst []byte, k K) []byte {
	out, err := c.AppendChecked(dst, k)
	if err != nil {
		panic(keyEncodeError{err})
	}
	return out
}

// keyEncodeError is the panic of a checkedKeyCodec.
type keyEncodeError struct{ err error }

// LocalKeyBy keys a stream within each task, whatever the input's
// partitioning: state is per key per task, and the same key in two tasks
// is two states. It is for state that is partial on purpose, as a
// pre-aggregation per task before a repartition; its keys are not checked.
func LocalKeyBy[K, T any](in *Port[T], name string, keyFn func(T) K, codec state.Codec[K]) *Keyed[K, T] {
	k := KeyBy(in, name, keyFn, codec)
	k.local = true
	in.g.keyBys--
	return k
}

// Setup is what a keyed operator's factory declares its state with, once per
// task. It is valid only during the factory call.
type Setup struct {
	task    int
	backend state.Backend
	scope   *state.KeyScope
	k       *keyedState
}

// Describe records what the operator's state means beyond the codecs of
// its declarations, say the size of the windows its state is keyed by:
// meaning, under what. A restore refuses a checkpoint whose job described
// what otherwise, as it refuses a state declared with another codec.
func (s *Setup) Describe(what, meaning string) {
	if s.k != nil {
		s.k.describe(what, meaning)
	}
}

// Task is the index of the task being set up.
func (s *Setup) Task() int { return s.task }

// Backend is the operator's state backend.
func (s *Setup) Backend() state.Backend { return s.backend }

// Scope is the current key, set by the runtime before each call.
func (s *Setup) Scope() *state.KeyScope { return s.scope }

// Context is what a keyed function sees for one call: the current key, a way
// to emit, timers.
type Context[K, Out any] struct {
	key     K
	out     endpoint[Out]
	timers  *state.Timers
	etimers *state.Timers
	wm      *int64 // the operator's watermark
	cursor  *Position
	now     func() time.Time
	op      *opBase
}

// Key is the key of the record (or timer) at hand.
func (c *Context[K, Out]) Key() K { return c.key }

// Emit sends v downstream.
func (c *Context[K, Out]) Emit(v Out) error { return c.out.collect(v) }

// EmitAt sends v downstream with event time ts instead of the record's.
func (c *Context[K, Out]) EmitAt(v Out, ts time.Time) error {
	saved := c.cursor.Timestamp
	c.cursor.Timestamp = ts.UnixMilli()
	err := c.out.collect(v)
	c.cursor.Timestamp = saved
	return err
}

// DropLate says that the operator drops the record at hand for being
// late (behind the watermark): weir counts it in
// weir_late_records_dropped_total and logs it. An operator that drops
// late records calls it, as weir's joins do, so that none goes without a
// word.
func (c *Context[K, Out]) DropLate() {
	if c.op != nil {
		wm := int64(noWatermark)
		if c.wm != nil {
			wm = *c.wm
		}
		c.op.dropLate(wm)
	}
}

// Position is where the record at hand came from; in a timer, a Position
// that names no record (Emitted).
func (c *Context[K, Out]) Position() Position { return *c.cursor }

// Now is the processing time.
func (c *Context[K, Out]) Now() time.Time { return c.now() }

// Timestamp is the event time of the record at hand, or, in OnEventTimer,
// the timer's time; in OnTimer, that of the record the task processed
// last, and before any (a restored timer due at once) the operator's
// watermark and 1 ms, or with no watermark the processing time. Records
// emitted now carry it.
func (c *Context[K, Out]) Timestamp() time.Time { return time.UnixMilli(c.cursor.Timestamp) }

// Watermark is the operator's event time: the least watermark of its
// inputs. Before the first watermark it is the zero time.
func (c *Context[K, Out]) Watermark() time.Time {
	if c.wm == nil || *c.wm == noWatermark {
		return time.Time{}
	}
	return watermarkTime(*c.wm)
}

// RegisterEventTimer asks for OnEventTimer to be called for the current key
// once the watermark reaches ts (at the next watermark, if it already has).
// Registering the same time twice is one timer.
func (c *Context[K, Out]) RegisterEventTimer(ts time.Time) error {
	if c.etimers == nil {
		return errors.New("register event timer: the operator has no OnEventTimer function")
	}
	return registerEventTimer(c.etimers, ts)
}

// DeleteEventTimer removes the current key's event-time timer at ts.
func (c *Context[K, Out]) DeleteEventTimer(ts time.Time) error {
	if c.etimers == nil {
		return errors.New("delete event timer: the operator has no OnEventTimer function")
	}
	if ts.UnixMilli() > maxEventTimerMillis {
		return nil // none can be registered there
	}
	return c.etimers.Delete(eventTimerAt(ts))
}

// RegisterTimer asks for OnTimer to be called for the current key at (or
// soon after) processing time ts. Registering the same time twice is one timer.
func (c *Context[K, Out]) RegisterTimer(ts time.Time) error {
	if c.timers == nil {
		return errors.New("register timer: the operator has no OnTimer function")
	}
	return c.timers.Register(ts)
}

// DeleteTimer removes the current key's timer at ts.
func (c *Context[K, Out]) DeleteTimer(ts time.Time) error {
	if c.timers == nil {
		return errors.New("delete timer: the operator has no OnTimer function")
	}
	return c.timers.Delete(ts)
}

// Processor is a keyed operator's behaviour, made per task by its factory.
type Processor[K, In, Out any] struct {
	Process func(ctx *Context[K, Out], in In) error
	// OnTimer, if set, is called when a timer registered for a key is due.
	OnTimer func(ctx *Context[K, Out], ts time.Time) error
	// OnEventTimer, if set, is called when the watermark reaches an
	// event-time timer registered for a key; timers fire in time order,
	// before the watermark goes on downstream.
	OnEventTimer func(ctx *Context[K, Out], ts time.Time) error
}

// keyedState is the state machinery of one keyed operator instance.
type keyedState struct {
	opBase
	backend state.Backend
	scope   state.KeyScope
	timers  *state.Timers
	etimers *state.Timers
	wm      int64 // the last watermark, noWatermark before the first
	check   keyCheck

	// described is what the operator says of its state besides the
	// declarations in scope and in scopes (a window's contents'); schema
	// is all of it, as restore found it, which each checkpoint records.
	described map[string]string
	scopes    []*state.KeyScope
	schema    map[string]string
}

// describe records what the operator's state means under what (see
// checkpoint.Ack.Schema): "key" is its key's codec, "window" its windows.
func (k *keyedState) describe(what, meaning string) {
	if k.described == nil {
		k.described = map[string]string{}
	}
	k.described[what] = meaning
}

// schemaNow is what the operator's state means: each state declared, as
// "state/NAME", and what the operator described.
func (k *keyedState) schemaNow() map[string]string {
	s := maps.Clone(k.described)
	if s == nil {
		s = map[string]string{}
	}
	for _, sc := range append([]*state.KeyScope{&k.scope}, k.scopes...) {
		for name, what := range sc.Declared() {
			s["state/"+name] = what
		}
	}
	return s
}

// checkSchema refuses restored state that the job reads as another thing
// than the job that wrote it: each entry both have must be the same.
func (k *keyedState) checkSchema(t *task, restored map[string]string) error {
	var changed []string
	for _, what := range slices.Sorted(maps.Keys(restored)) {
		if now, ok := k.schema[what]; ok && now != restored[what] {
			changed = append(changed, fmt.Sprintf("%s was %q, is %q", what, restored[what], now))
		}
	}
	if len(changed) == 0 {
		return nil
	}
	return fmt.Errorf("%w: operator %s: its state in checkpoint %d means another thing to this job (%s): restored, it would be read wrong "+
		"(a codec's old bytes decoded as other values, or none of its keys found, or windows looked up by another size); "+
		"keep what the state was written with (a codec renamed, its bytes kept, keeps its old name with a CodecName method), "+
		"or give the operator another name and restore with --allow-non-restored-state, which drops its state",
		ErrIncompatibleCheckpoint, k.name, t.restoredFrom, strings.Join(changed, "; "))
}

func (k *keyedState) open(t *task, n *node) error {
	k.initKeyCheck(t)
	// The backend creates the directory if it keeps files there.
	b, err := t.backends(t.id, n.name, filepath.Join(t.stateDir, n.name))
	if err != nil {
		return fmt.Errorf("operator %s: open state backend: %w", n.name, err)
	}
	k.backend = b
	t.addCloser(b.Close)
	return nil
}

// timerState and eventTimerState name the tables that keep an operator's
// processing-time and event-time timers.
const (
	timerState      = "_timers"
	eventTimerState = "_event_timers"
)

func (k *keyedState) initTimers() error {
	var err error
	if k.timers, err = state.NewTimers(k.backend, &k.scope, timerState); err != nil {
		return fmt.Errorf("operator %s: timers: %w", k.name, err)
	}
	return nil
}

func (k *keyedState) initEventTimers() error {
	var err error
	if k.etimers, err = state.NewTimers(k.backend, &k.scope, eventTimerState); err != nil {
		return fmt.Errorf("operator %s: event timers: %w", k.name, err)
	}
	return nil
}

// advance takes a watermark: it returns false if it does not move the
// operator's event time (an idle input, or not past the last).
func (k *keyedState) advance(w wmark) bool {
	if w.idle || w.ts <= k.wm {
		return false
	}
	k.wm = w.ts
	return true
}

// fireEventTimers fires the event-time timers the watermark has reached,
// each with its key in ctx and its time as the event time of what it emits.
func fireEventTimers[K, Out any](k *keyedState, codec state.Codec[K], ctx *Context[K, Out], onTimer func(*Context[K, Out], time.Time) error) error {
	if k.etimers == nil {
		return nil
	}
	saved := *k.cursor
	defer func() { *k.cursor = saved }()
	return k.etimers.FireDue(eventTimerLimit(k.wm), func(at time.Time) (err error) {
		defer k.recoverTo(&err)
		ts := eventTimeOf(at)
		key, err := codec.Decode(k.scope.Key())
		if err != nil {
			return fmt.Errorf("operator %s: decode event timer key: %w", k.name, err)
		}
		ctx.key = key
		*k.cursor = emittedPosition(k.name, ts.UnixMilli())
		if err := onTimer(ctx, ts); err != nil {
			return k.recordErr(fmt.Errorf("event timer %s: %w", ts.Format(time.RFC3339Nano), err))
		}
		return nil
	})
}

// restore loads the operator's state from the restored checkpoint, if any.
// It runs after the factory declared the tables.
func (k *keyedState) restore(t *task) error {
	k.schema = k.schemaNow()
	a := t.restoredAck(k.name)
	if a != nil && a.Watermark != nil {
		k.wm = *a.Watermark
	}
	if a == nil || a.State == nil {
		return nil
	}
	if err := k.checkSchema(t, a.Schema); err != nil {
		return err
	}
	// A state the job no longer declares stays in the backend: what it
	// means is carried on, so that a later version that declares it again
	// is checked against what wrote it.
	for what, meaning := range a.Schema {
		if _, ok := k.schema[what]; !ok {
			k.schema[what] = meaning
		}
	}
	if err := k.backend.Restore(t.ctx, t.storage, *a.State); err != nil {
		err = fmt.Errorf("operator %s: restore state of checkpoint %d: %w", k.name, t.restoredFrom, err)
		if errors.Is(err, checkpoint.ErrCorrupt) || errors.Is(err, checkpoint.ErrNotFound) {
			return &unusableStateError{checkpoint: t.restoredFrom, err: err}
		}
		return err
	}
	if k.timers != nil {
		if err := k.timers.Rebuild(); err != nil {
			return fmt.Errorf("operator %s: rebuild timers: %w", k.name, err)
		}
	}
	if k.etimers != nil {
		if err := k.etimers.Rebuild(); err != nil {
			return fmt.Errorf("operator %s: rebuild event timers: %w", k.name, err)
		}
	}
	return nil
}

// snapshot takes the synchronous part of the snapshot at barrier id and
// hands the upload to a goroutine of the task; processing resumes at once.
func (k *keyedState) snapshot(id checkpoint.ID, alignment time.Duration) {
	snap, err := k.backend.Snapshot(id)
	if err != nil {
		k.t.decline(id, fmt.Errorf("operator %s: snapshot: %w", k.name, err))
		return
	}
	t := k.t
	wm := k.wm
	dir := checkpoint.OwnerDir(t.job, t.id, id, t.epoch, t.attempt) + k.name + "/"
	shared := checkpoint.SharedDir(t.job, t.id) + k.name + "/"
	t.uploads.Go(func() {
		defer snap.Release()
		h, err := snap.Upload(t.ctx, t.storage, dir, shared)
		if err != nil {
			t.decline(id, fmt.Errorf("operator %s: upload state: %w", k.name, err))
			return
		}
		a := checkpoint.Ack{Operator: k.name, State: &h, Alignment: alignment, Schema: k.schema}
		if wm != noWatermark {
			a.Watermark = &wm
		}
		t.ack(id, a)
	})
}

type keyedOp[K, In, Out any] struct {
	keyedState
	guard  keyGuard
	keyFn  func(In) K
	codec  state.Codec[K]
	keyBuf []byte
	proc   Processor[K, In, Out]
	ctx    Context[K, Out]
	out    endpoint[Out]

	// pf is the backend if it prefetches (see prefetchBatch); group holds
	// the keys of the records at hand.
	pf    state.Prefetcher
	group keyGroup[K]
}

func (o *keyedOp[K, In, Out]) apply(v In) (err error) {
	defer o.recoverTo(&err)
	k := o.keyFn(v)
	o.keyBuf = o.codec.Append(o.keyBuf[:0], k)
	if ok, err := checkKey(&o.keyedState, &o.guard, o.keyBuf, k); !ok {
		return err
	}
	o.scope.Set(o.keyBuf)
	o.ctx.key = k
	return o.proc.Process(&o.ctx, v)
}

func (o *keyedOp[K, In, Out]) collect(v In) error {
	if err := o.apply(v); err != nil {
		return o.recordErr(err)
	}
	return nil
}

func (o *keyedOp[K, In, Out]) collectBatch(vals []In, pos []Position) error {
	if o.pf != nil {
		return o.prefetchBatch(o.pf, vals, pos)
	}
	return eachRecord(o.cursor, o.collect, vals, pos)
}

func (o *keyedOp[K, In, Out]) barrier(id checkpoint.ID) error {
	o.snapshot(id, 0)
	return o.out.barrier(id)
}

func (o *keyedOp[K, In, Out]) watermark(w wmark) error {
	if o.advance(w) {
		if err := fireEventTimers(&o.keyedState, o.codec, &o.ctx, o.proc.OnEventTimer); err != nil {
			return err
		}
	}
	return o.out.watermark(w)
}

func (o *keyedOp[K, In, Out]) end() error { return o.out.end() }

var _ endpoint[int] = (*keyedOp[int, int, int])(nil)

func (o *keyedOp[K, In, Out]) fireTimers(now time.Time) error {
	return fireKeyedTimers(&o.keyedState, o.codec, &o.ctx, o.proc.OnTimer, now)
}

func (k *keyedState) nextTimer() (time.Time, bool) { return k.timers.Next() }

// fireKeyedTimers fires the due timers of a keyed operator, each with its
// key decoded into ctx, turning errors and panics into RecordErrors.
func fireKeyedTimers[K, Out any](k *keyedState, codec state.Codec[K], ctx *Context[K, Out], onTimer func(*Context[K, Out], time.Time) error, now time.Time) error {
	// What a processing-time timer emits keeps the event time of the
	// record processed last, as before; it is not that record.
	saved := *k.cursor
	defer func() { *k.cursor = saved }()
	*k.cursor = emittedPosition(k.name, timerEventTime(saved, k.wm, now))
	return k.timers.FireDue(now, func(ts time.Time) (err error) {
		defer k.recoverTo(&err)
		key, err := codec.Decode(k.scope.Key())
		if err != nil {
			return fmt.Errorf("operator %s: decode timer key: %w", k.name, err)
		}
		ctx.key = key
		if err := onTimer(ctx, ts); err != nil {
			return k.recordErr(fmt.Errorf("timer %s: %w", ts.Format(time.RFC3339Nano), err))
		}
		return nil
	})
}

// timerEventTime is the event time of what a processing-time timer emits:
// that of the record the task processed last (last), and before any (a
// timer due at once after a restore) the operator's event time, its
// watermark wm and 1 ms (the earliest time not late downstream); with no
// watermark either, the processing time now. It was 0 there: 1970,
// behind every window's watermark downstream, where it was dropped.
func timerEventTime(last Position, wm int64, now time.Time) int64 {
	switch {
	case last != (Position{}):
		return last.Timestamp
	case wm != noWatermark && wm < endOfTime:
		return wm + 1
	}
	return now.UnixMilli()
}

// KeyedProcess adds a keyed operator. factory runs once per task: it declares
// the operator's state on setup and returns the functions that use it.
func KeyedProcess[K, In, Out any](in *Keyed[K, In], name string, factory func(s *Setup) (Processor[K, In, Out], error)) *Port[Out] {
	g := in.in.g
	n := g.add(name, kindOperator, in.in.n)
	if factory == nil {
		g.errorf("operator %q: factory is nil", name)
	}
	out := newPort[Out](g, n)
	connect(in.in, n, 0)
	n.build = func(t *task) error {
		o := &keyedOp[K, In, Out]{guard: in.guard(t), keyFn: in.keyFn, codec: in.codec, out: out.output(t)}
		o.opBase = t.base(n)
		o.wm = noWatermark
		o.describe("key", state.CodecName(in.codec))
		if err := o.open(t, n); err != nil {
			return err
		}
		proc, err := callFactory(factory, &Setup{task: t.id, backend: o.backend, scope: &o.scope, k: &o.keyedState})
		if err != nil {
			return fmt.Errorf("operator %s: setup: %w", n.name, err)
		}
		if proc.Process == nil {
			return fmt.Errorf("operator %s: setup returned no Process function", n.name)
		}
		o.proc = proc
		if proc.OnTimer != nil {
			if err := o.initTimers(); err != nil {
				return err
			}
		}
		if proc.OnEventTimer != nil {
			if err := o.initEventTimers(); err != nil {
				return err
			}
		}
		if err := o.restore(t); err != nil {
			return err
		}
		o.ctx = Context[K, Out]{out: o.out, timers: o.timers, etimers: o.etimers, wm: &o.wm, cursor: o.cursor, now: t.now, op: &o.opBase}
		o.pf, _ = o.backend.(state.Prefetcher)
		t.setEndpoints(n, o)
		if o.timers != nil {
			t.addTimed(n, o)
		}
		return nil
	}
	return out
}

// callFactory runs a user factory, turning a panic into an error.
func callFactory[P any](factory func(*Setup) (P, error), s *Setup) (p P, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w in factory: %v", ErrPanic, r)
		}
	}()
	return factory(s)
}
