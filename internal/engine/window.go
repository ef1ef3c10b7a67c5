package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/state"
)

// Windows on keyed streams, in event time, as Flink's with its
// EventTimeTrigger: a window [Start, End) fires once the watermark reaches
// End-1 ms, and its result carries the event time End-1 ms. With allowed
// lateness L its state stays until the watermark reaches End-1+L; a record
// for it that comes in that time (late, but not too late) is added and the
// window fires again at once, with the updated result. A record all of
// whose windows are past their lateness goes to the operator's late
// output instead.
//
// State, per key and window, lives in the operator's backend under the key
// followed by the window's start (a namespace): an aggregate's accumulator
// (read, updated and written per record), or the records of a full-window
// function (appended without a read: a Pebble merge). Session windows also
// keep, per key, their sessions (start to end). Each window has an
// event-time timer at End-1, and another at End-1+L when L > 0; all of it
// is checkpointed with the rest of the operator's state.

// Window is a window of event time, [Start, End).
type Window struct {
	Start, End time.Time
}

type windowKind int

const (
	tumbling windowKind = iota + 1
	sliding
	session
)

// WindowAssigner says which windows a record belongs to.
type WindowAssigner struct {
	kind             windowKind
	size, slide, gap int64 // ms
	name             string
	invalid          error
}

// TumblingWindows are windows of size, one after the other, aligned to the
// epoch: each record is in one.
func TumblingWindows(size time.Duration) WindowAssigner {
	w := WindowAssigner{kind: tumbling, size: size.Milliseconds(), slide: size.Milliseconds(), name: "tumbling"}
	if w.size <= 0 {
		w.invalid = fmt.Errorf("tumbling window size %v: want at least 1ms", size)
	}
	return w
}

// SlidingWindows are windows of size starting every slide: each record is
// in size/slide of them. size must be a multiple of slide.
func SlidingWindows(size, slide time.Duration) WindowAssigner {
	w := WindowAssigner{kind: sliding, size: size.Milliseconds(), slide: slide.Milliseconds(), name: "sliding"}
	switch {
	case w.slide <= 0 || w.size <= 0:
		w.invalid = fmt.Errorf("sliding window size %v, slide %v: want both at least 1ms", size, slide)
	case w.size%w.slide != 0:
		w.invalid = fmt.Errorf("sliding window size %v is not a multiple of its slide %v", size, slide)
	}
	return w
}

// SessionWindows group a key's records that come at most gap apart: a
// record opens [ts, ts+gap), and windows that overlap or touch merge, as
// in Flink and Kafka Streams.
func SessionWindows(gap time.Duration) WindowAssigner {
	w := WindowAssigner{kind: session, gap: gap.Milliseconds(), name: "session"}
	if w.gap <= 0 {
		w.invalid = fmt.Errorf("session gap %v: want at least 1ms", gap)
	}
	return w
}

// Windows returns the windows a record at ts belongs to (none for session
// windows, which merge); for operators built on the assigner, as joins.
func (w WindowAssigner) Windows(ts time.Time) []Window {
	if w.kind == session || w.invalid != nil || w.kind == 0 {
		return nil
	}
	t := ts.UnixMilli()
	var out []Window
	for start := t - mod(t, w.slide); start > t-w.size; start -= w.slide {
		out = append(out, Window{Start: time.UnixMilli(start), End: time.UnixMilli(start + w.size)})
	}
	return out
}

// Layout says how w's windows find their state: "fixed 1s", a window by
// its key and start, its timer at its end finding the start by the size
// (tumbling and sliding windows alike, whatever the slide), or "sessions",
// each of a key with its own end. A restore into windows of another
// layout is refused: the windows open at the checkpoint would not fire.
func (w WindowAssigner) Layout() string {
	if w.kind == session {
		return "sessions"
	}
	return "fixed " + (time.Duration(w.size) * time.Millisecond).String()
}

// Size is the length of the assigner's windows (0 for session windows).
func (w WindowAssigner) Size() time.Duration { return time.Duration(w.size) * time.Millisecond }

// Err says why the assigner is not valid, or whether it is a session
// assigner where fixed windows are needed (fixed true).
func (w WindowAssigner) Err(fixed bool) error {
	switch {
	case w.kind == 0:
		return errors.New("no window assigner (TumblingWindows, SlidingWindows, SessionWindows)")
	case w.invalid != nil:
		return w.invalid
	case fixed && w.kind == session:
		return errors.New("session windows do not fit here: use tumbling or sliding windows")
	}
	return nil
}

// WindowOptions are a window operator's settings.
type WindowOptions struct {
	// AllowedLateness keeps a window's state this long (in event time)
	// after it fired, so that late records update it.
	AllowedLateness time.Duration
}

// windowContents is what a window holds: an accumulator or the records.
// ns is the key and the window's start; it is the scope of the contents'
// state while the contents' methods run.
type windowContents[K, In, Out any] interface {
	add(ns []byte, v In) error
	// merge moves src's contents into dst's (session windows).
	merge(dst, src []byte) error
	// fire emits the window's result.
	fire(ns []byte, key K, w Window, out endpoint[Out]) error
	clear(ns []byte) error
	// has says whether the window has contents.
	has(ns []byte) (bool, error)
}

type windowOp[K, In, Out any] struct {
	keyedState
	guard    keyGuard
	keyFn    func(In) K
	codec    state.Codec[K]
	assigner WindowAssigner
	lateness int64 // ms
	contents windowContents[K, In, Out]
	sessions *state.Map[int64, int64] // start -> end, per key (session windows)
	out      endpoint[Out]
	late     endpoint[In]
	lateUsed bool // something takes the late records: else they are counted, dropped

	keyBuf []byte
	nsBuf  []byte
	nsBuf2 []byte
	key    K
}

// ns is the key at hand followed by start: the namespace of a window.
func (o *windowOp[K, In, Out]) ns(buf *[]byte, start int64) []byte {
	*buf = binary.BigEndian.AppendUint64(append((*buf)[:0], o.keyBuf...), uint64(start))
	return *buf
}

func (o *windowOp[K, In, Out]) window(start, end int64) Window {
	return Window{Start: time.UnixMilli(start), End: time.UnixMilli(end)}
}

// tooLate says whether a window ending at end is past its lateness.
func (o *windowOp[K, In, Out]) tooLate(end int64) bool {
	return o.wm != noWatermark && end-1+o.lateness <= o.wm
}

// setKey makes v's key the key at hand, once checkKey said that it
// belongs to the task; false: skip the record (set aside, or err).
func (o *windowOp[K, In, Out]) setKey(v In) (bool, error) {
	o.key = o.keyFn(v)
	o.keyBuf = o.codec.Append(o.keyBuf[:0], o.key)
	if ok, err := checkKey(&o.keyedState, &o.guard, o.keyBuf, o.key); !ok {
		return false, err
	}
	o.scope.Set(o.keyBuf)
	return true, nil
}

func (o *windowOp[K, In, Out]) apply(v In) (err error) {
	defer o.recoverTo(&err)
	if ok, err := o.setKey(v); !ok {
		return err
	}
	ts := o.cursor.Timestamp
	if o.assigner.kind == session {
		return o.addToSession(v, ts)
	}
	size, slide := o.assigner.size, o.assigner.slide
	last := ts - mod(ts, slide) // the start of the last window holding ts
	added := false
	for start := last; start > ts-size; start -= slide {
		end := start + size
		if o.tooLate(end) {
			continue
		}
		added = true
		if err := o.addTo(v, start, end); err != nil {
			return err
		}
	}
	if !added {
		return o.toLate(v)
	}
	return nil
}

// toLate passes on v, past the lateness of all its windows, as a late
// record, or drops it with a word when nothing takes them.
func (o *windowOp[K, In, Out]) toLate(v In) error {
	if !o.lateUsed {
		o.dropLate(o.wm)
		return nil
	}
	return o.late.collect(v)
}

// mod is x mod m, in [0, m) for negative x too.
func mod(x, m int64) int64 {
	r := x % m
	if r < 0 {
		r += m
	}
	return r
}

// addTo adds v to window [start, end) and fires it at once if the
// watermark has passed its end (a late record within the lateness), else
// makes sure its timers are set.
func (o *windowOp[K, In, Out]) addTo(v In, start, end int64) error {
	ns := o.ns(&o.nsBuf, start)
	if err := o.contents.add(ns, v); err != nil {
		return err
	}
	if o.wm != noWatermark && end-1 <= o.wm {
		// Late within the lateness (so lateness > 0): fire the update, and
		// keep the state until the lateness is over, as a window that got
		// its first record only now has no timer yet.
		if err := o.fireNow(ns, start, end); err != nil {
			return err
		}
		return registerEventTimer(o.etimers, time.UnixMilli(end-1+o.lateness))
	}
	return o.setTimers(end)
}

// setTimers sets the timers of the window ending at end. Timers are per key
// and time, not per window: a timer another window shares, or one of a
// window that merged away, finds by startOf what ends then, if anything.
// So timers are never deleted.
func (o *windowOp[K, In, Out]) setTimers(end int64) error {
	if err := registerEventTimer(o.etimers, time.UnixMilli(end-1)); err != nil {
		return err
	}
	if o.lateness > 0 {
		return registerEventTimer(o.etimers, time.UnixMilli(end-1+o.lateness))
	}
	return nil
}

// fireNow fires a window outside a timer: its result carries the window's
// event time, End-1, as a timer's would, and is the window's, not the
// record's at hand.
func (o *windowOp[K, In, Out]) fireNow(ns []byte, start, end int64) error {
	saved := *o.cursor
	*o.cursor = emittedPosition(o.name, end-1)
	err := o.contents.fire(ns, o.key, o.window(start, end), o.out)
	*o.cursor = saved
	return err
}

// addToSession puts v into the key's session windows: [ts, ts+gap) merged
// with every session it overlaps or touches (records exactly gap apart are
// one session, as in Flink and Kafka Streams). Whether v is late is judged
// on the merged session, as Flink does.
func (o *windowOp[K, In, Out]) addToSession(v In, ts int64) error {
	start, end := ts, ts+o.assigner.gap
	type span struct{ start, end int64 }
	var overlapping []span
	err := o.sessions.Range(func(s, e int64) error {
		if s <= end && start <= e {
			overlapping = append(overlapping, span{s, e})
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, s := range overlapping {
		start, end = min(start, s.start), max(end, s.end)
	}
	if o.tooLate(end) {
		return o.toLate(v)
	}
	dst := o.ns(&o.nsBuf, start)
	for _, s := range overlapping {
		if s.start != start {
			if err := o.contents.merge(dst, o.ns(&o.nsBuf2, s.start)); err != nil {
				return err
			}
			if err := o.sessions.Delete(s.start); err != nil {
				return err
			}
		}
	}
	if err := o.sessions.Put(start, end); err != nil {
		return err
	}
	return o.addTo(v, start, end)
}

func (o *windowOp[K, In, Out]) collect(v In) error {
	if err := o.apply(v); err != nil {
		return o.recordErr(err)
	}
	return nil
}

func (o *windowOp[K, In, Out]) collectBatch(vals []In, pos []Position) error {
	return eachRecord(o.cursor, o.collect, vals, pos)
}

// onTimer handles the event-time timer at ts of the key in scope: it fires
// the window ending at ts+1, and clears the one whose lateness ends at ts.
func (o *windowOp[K, In, Out]) onTimer(ts time.Time) (err error) {
	defer o.recoverTo(&err)
	o.keyBuf = append(o.keyBuf[:0], o.scope.Key()...)
	if o.key, err = o.codec.Decode(o.keyBuf); err != nil {
		return fmt.Errorf("operator %s: decode window key: %w", o.name, err)
	}
	t := ts.UnixMilli()
	if err := o.fireEnding(t + 1); err != nil {
		return o.recordErr(err)
	}
	if o.lateness > 0 {
		if err := o.clearEnding(t + 1 - o.lateness); err != nil {
			return o.recordErr(err)
		}
	}
	return nil
}

// startOf finds the window of the key at hand that ends at end.
func (o *windowOp[K, In, Out]) startOf(end int64) (int64, bool, error) {
	if o.assigner.kind != session {
		start := end - o.assigner.size
		ok, err := o.contents.has(o.ns(&o.nsBuf, start))
		return start, ok, err
	}
	var start int64
	found := false
	err := o.sessions.Range(func(s, e int64) error {
		if e == end {
			start, found = s, true
		}
		return nil
	})
	return start, found, err
}

func (o *windowOp[K, In, Out]) fireEnding(end int64) error {
	start, ok, err := o.startOf(end)
	if err != nil || !ok {
		return err
	}
	ns := o.ns(&o.nsBuf, start)
	if err := o.contents.fire(ns, o.key, o.window(start, end), o.out); err != nil {
		return err
	}
	if o.lateness == 0 {
		return o.clearWindow(ns, start)
	}
	return nil
}

func (o *windowOp[K, In, Out]) clearEnding(end int64) error {
	start, ok, err := o.startOf(end)
	if err != nil || !ok {
		return err
	}
	return o.clearWindow(o.ns(&o.nsBuf, start), start)
}

func (o *windowOp[K, In, Out]) clearWindow(ns []byte, start int64) error {
	if err := o.contents.clear(ns); err != nil {
		return err
	}
	if o.assigner.kind == session {
		return o.sessions.Delete(start)
	}
	return nil
}

func (o *windowOp[K, In, Out]) watermark(w wmark) error {
	if o.advance(w) {
		saved := *o.cursor
		err := o.etimers.FireDue(eventTimerLimit(o.wm), func(at time.Time) error {
			ts := eventTimeOf(at)
			*o.cursor = emittedPosition(o.name, ts.UnixMilli())
			return o.onTimer(ts)
		})
		*o.cursor = saved
		if err != nil {
			return err
		}
	}
	if err := o.out.watermark(w); err != nil {
		return err
	}
	return o.late.watermark(w)
}

func (o *windowOp[K, In, Out]) barrier(id checkpoint.ID) error {
	o.snapshot(id, 0)
	if err := o.out.barrier(id); err != nil {
		return err
	}
	return o.late.barrier(id)
}

func (o *windowOp[K, In, Out]) end() error {
	if err := o.out.end(); err != nil {
		return err
	}
	return o.late.end()
}

var _ endpoint[int] = (*windowOp[int, int, int])(nil)

// window state names in the operator's backend.
const (
	windowContentsState = "_window"
	windowSessionsState = "_window_sessions"
)

// addWindow adds a window operator: records keyed by in, assigned to
// windows by w, held by the contents mk declares. It returns the results
// and the late records.
func addWindow[K, In, Out any](in *Keyed[K, In], name string, w WindowAssigner, opts WindowOptions,
	mk func(b state.Backend, ns *state.KeyScope) (windowContents[K, In, Out], error)) (*Port[Out], *Port[In]) {
	g := in.in.g
	n := g.add(name, kindOperator, in.in.n)
	if w.kind == 0 {
		g.errorf("window %q: no window assigner (TumblingWindows, SlidingWindows, SessionWindows)", name)
	} else if w.invalid != nil {
		g.errorf("window %q: %v", name, w.invalid)
	}
	if opts.AllowedLateness < 0 {
		g.errorf("window %q: allowed lateness %v is negative", name, opts.AllowedLateness)
	}
	out := newPort[Out](g, n)
	late := newPort[In](g, n)
	connect(in.in, n, 0)
	n.build = func(t *task) error {
		o := &windowOp[K, In, Out]{guard: in.guard(t), keyFn: in.keyFn, codec: in.codec, assigner: w, lateness: opts.AllowedLateness.Milliseconds(),
			out: out.output(t), late: late.output(t), lateUsed: len(late.consumers) > 0}
		o.opBase = t.base(n)
		o.wm = noWatermark
		// A window's state is found by its key and start, and its timers
		// by its end: restored into windows of another size, none would
		// fire (see checkpoint.Ack.Schema).
		o.describe("key", state.CodecName(in.codec))
		o.describe("window", w.Layout())
		if err := o.open(t, n); err != nil {
			return err
		}
		// The contents' state is scoped to a window of a key: a scope of
		// its own, which the contents set.
		ns := &state.KeyScope{}
		o.scopes = append(o.scopes, ns)
		var err error
		if o.contents, err = mk(o.backend, ns); err != nil {
			return fmt.Errorf("operator %s: window state: %w", n.name, err)
		}
		if w.kind == session {
			if o.sessions, err = state.NewMap(o.backend, &o.scope, windowSessionsState, state.Int64(), state.Int64()); err != nil {
				return fmt.Errorf("operator %s: window state: %w", n.name, err)
			}
		}
		if err := o.initEventTimers(); err != nil {
			return err
		}
		if err := o.restore(t); err != nil {
			return err
		}
		t.setEndpoints(n, o)
		return nil
	}
	return out, late
}

// --- aggregate contents ----------------------------------------------------

type aggContents[K, In, Acc, Out any] struct {
	scope  *state.KeyScope
	acc    *state.Value[Acc]
	add_   func(acc Acc, present bool, v In) Acc
	merge_ func(a, b Acc) Acc
	result func(key K, w Window, acc Acc) (Out, error)
}

func (c *aggContents[K, In, Acc, Out]) add(ns []byte, v In) error {
	c.scope.Set(ns)
	acc, ok, err := c.acc.Get()
	if err != nil {
		return err
	}
	return c.acc.Set(c.add_(acc, ok, v))
}

func (c *aggContents[K, In, Acc, Out]) merge(dst, src []byte) error {
	if c.merge_ == nil {
		return errors.New("session windows need the aggregate's Merge function")
	}
	c.scope.Set(src)
	a, ok, err := c.acc.Get()
	if err != nil || !ok {
		return err
	}
	if err := c.acc.Clear(); err != nil {
		return err
	}
	c.scope.Set(dst)
	b, ok, err := c.acc.Get()
	if err != nil {
		return err
	}
	if ok {
		a = c.merge_(b, a)
	}
	return c.acc.Set(a)
}

func (c *aggContents[K, In, Acc, Out]) fire(ns []byte, key K, w Window, out endpoint[Out]) error {
	c.scope.Set(ns)
	acc, ok, err := c.acc.Get()
	if err != nil || !ok {
		return err
	}
	r, err := c.result(key, w, acc)
	if err != nil {
		return err
	}
	return out.collect(r)
}

func (c *aggContents[K, In, Acc, Out]) clear(ns []byte) error {
	c.scope.Set(ns)
	return c.acc.Clear()
}

func (c *aggContents[K, In, Acc, Out]) has(ns []byte) (bool, error) {
	c.scope.Set(ns)
	_, ok, err := c.acc.Get()
	return ok, err
}

// WindowAggregate adds a window operator that aggregates incrementally:
// add folds each record into its window's accumulator (the zero Acc for a
// new window), merge joins two accumulators (session windows need it) and
// result makes the output when the window fires. It returns the results
// and the records that came too late for every window they belong to.
func WindowAggregate[K, In, Acc, Out any](in *Keyed[K, In], name string, w WindowAssigner, opts WindowOptions, acc state.Codec[Acc],
	add func(acc Acc, v In) Acc, merge func(a, b Acc) Acc, result func(key K, w Window, acc Acc) (Out, error)) (*Port[Out], *Port[In]) {
	if add == nil || result == nil || acc == nil {
		in.in.g.errorf("window %q: add, result and the accumulator codec are required", name)
	}
	if w.kind == session && merge == nil {
		in.in.g.errorf("window %q: session windows need a merge function", name)
	}
	return addWindow(in, name, w, opts, func(b state.Backend, ns *state.KeyScope) (windowContents[K, In, Out], error) {
		v, err := state.NewValue(b, ns, windowContentsState, acc)
		if err != nil {
			return nil, err
		}
		return &aggContents[K, In, Acc, Out]{scope: ns, acc: v, merge_: merge, result: result,
			add_: func(a Acc, _ bool, x In) Acc { return add(a, x) }}, nil
	})
}

// WindowReduce adds a window operator that combines a window's records
// pairwise with reduce (it must be associative) and makes the output with
// result when the window fires.
func WindowReduce[K, In, Out any](in *Keyed[K, In], name string, w WindowAssigner, opts WindowOptions, codec state.Codec[In],
	reduce func(a, b In) In, result func(key K, w Window, v In) (Out, error)) (*Port[Out], *Port[In]) {
	if reduce == nil || result == nil || codec == nil {
		in.in.g.errorf("window %q: reduce, result and the record codec are required", name)
	}
	return addWindow(in, name, w, opts, func(b state.Backend, ns *state.KeyScope) (windowContents[K, In, Out], error) {
		v, err := state.NewValue(b, ns, windowContentsState, codec)
		if err != nil {
			return nil, err
		}
		return &aggContents[K, In, In, Out]{scope: ns, acc: v, merge_: reduce, result: result,
			add_: func(a In, present bool, x In) In {
				if !present {
					return x
				}
				return reduce(a, x)
			}}, nil
	})
}

// --- full-window contents --------------------------------------------------

type listContents[K, In, Out any] struct {
	scope *state.KeyScope
	list  *state.List[In]
	fn    func(key K, w Window, items []In, out *Emitter[Out]) error
	items []In
}

func (c *listContents[K, In, Out]) add(ns []byte, v In) error {
	c.scope.Set(ns)
	return c.list.Add(v)
}

func (c *listContents[K, In, Out]) merge(dst, src []byte) error {
	c.scope.Set(src)
	items, err := c.list.All()
	if err != nil {
		return err
	}
	if err := c.list.Clear(); err != nil {
		return err
	}
	c.scope.Set(dst)
	for _, x := range items {
		if err := c.list.Add(x); err != nil {
			return err
		}
	}
	return nil
}

func (c *listContents[K, In, Out]) fire(ns []byte, key K, w Window, out endpoint[Out]) error {
	c.scope.Set(ns)
	c.items = c.items[:0]
	if err := c.list.Range(func(x In) error { c.items = append(c.items, x); return nil }); err != nil {
		return err
	}
	if len(c.items) == 0 {
		return nil
	}
	em := Emitter[Out]{out: out}
	err := c.fn(key, w, c.items, &em)
	clear(c.items)
	if em.err != nil {
		return em.err
	}
	return err
}

func (c *listContents[K, In, Out]) clear(ns []byte) error {
	c.scope.Set(ns)
	return c.list.Clear()
}

func (c *listContents[K, In, Out]) has(ns []byte) (bool, error) {
	c.scope.Set(ns)
	found := false
	errStop := errors.New("stop")
	err := c.list.Range(func(In) error { found = true; return errStop })
	if err == errStop {
		err = nil
	}
	return found, err
}

// WindowApply adds a window operator with a full-window function: each
// window keeps its records (appended without reading the window back), and
// fn gets them all, in arrival order, when the window fires.
func WindowApply[K, In, Out any](in *Keyed[K, In], name string, w WindowAssigner, opts WindowOptions, codec state.Codec[In],
	fn func(key K, w Window, items []In, out *Emitter[Out]) error) (*Port[Out], *Port[In]) {
	if fn == nil || codec == nil {
		in.in.g.errorf("window %q: the window function and the record codec are required", name)
	}
	return addWindow(in, name, w, opts, func(b state.Backend, ns *state.KeyScope) (windowContents[K, In, Out], error) {
		l, err := state.NewList(b, ns, windowContentsState, codec)
		if err != nil {
			return nil, err
		}
		return &listContents[K, In, Out]{scope: ns, list: l, fn: fn}, nil
	})
}
