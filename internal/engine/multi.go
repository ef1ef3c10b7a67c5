package engine

import (
	"context"
	"fmt"
	"reflect"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/align"
	"github.com/weirstream/weir/state"
)

// input is one channel into a multi-input root, typed on the inside.
type input interface {
	recvCase() reflect.SelectCase
	// handle processes a received message: the records of a batch go to the
	// operator; a barrier, a watermark or the end is returned.
	handle(v reflect.Value) (c control, err error)
}

// control is what a message other than records says.
type control struct {
	barrier checkpoint.ID
	wm      *wmark
	end     bool
}

type typedInput[T any] struct {
	ch     chan *message[T]
	target func(vals []T, pos []Position) error
}

func (in *typedInput[T]) recvCase() reflect.SelectCase {
	return reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(in.ch)}
}

func (in *typedInput[T]) handle(v reflect.Value) (control, error) {
	m := v.Interface().(*message[T])
	if m.barrier != 0 || m.wm != nil || m.end {
		return control{barrier: m.barrier, wm: m.wm, end: m.end}, nil
	}
	return control{}, in.target(m.values, m.positions)
}

// multiOp is the operator at a multi-input root.
type multiOp interface {
	// snapshot runs once barrier id has been aligned on every input: take
	// the snapshot and forward the barrier.
	snapshot(id checkpoint.ID, alignment time.Duration) error
	// watermark takes the least watermark of the inputs, when it moves.
	watermark(w wmark) error
	end() error
}

// multiRoot drives a multi-input operator: it reads one bounded channel per
// input, never an input the aligner holds blocked, and carries out the
// aligner's actions.
type multiRoot struct {
	t       *task
	r       *root
	name    string
	inputs  []input
	aligner *align.Aligner
	op      multiOp
	wms     inputWatermarks
}

// inputWatermarks combines the watermarks of several inputs: the least of
// those not idle; idle if all are. An input that has sent none yet holds
// the others back.
type inputWatermarks struct {
	in   []wmark
	out  wmark
	sent bool
}

func newInputWatermarks(n int) inputWatermarks {
	w := inputWatermarks{in: make([]wmark, n), out: wmark{ts: noWatermark}}
	for i := range w.in {
		w.in[i].ts = noWatermark
	}
	return w
}

// update takes input i's watermark and returns the combined one if it
// changed.
func (w *inputWatermarks) update(i int, x wmark) (wmark, bool) {
	if x.idle {
		w.in[i].idle = true
	} else {
		w.in[i] = wmark{ts: max(w.in[i].ts, x.ts)}
	}
	low, active := int64(endOfTime), false
	for _, in := range w.in {
		if !in.idle {
			low, active = min(low, in.ts), true
		}
	}
	next := wmark{ts: w.out.ts, idle: !active}
	if active && low > next.ts {
		next.ts = low
	}
	if next == w.out && (w.sent || next.ts == noWatermark) {
		return wmark{}, false
	}
	w.out, w.sent = next, true
	return next, true
}

func (m *multiRoot) run(ctx context.Context) error {
	const (
		caseMail = iota
		caseDone
		caseTimer
		firstInput
	)
	cases := make([]reflect.SelectCase, firstInput, firstInput+len(m.inputs))
	cases[caseMail] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(m.r.mail.signal)}
	cases[caseDone] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())}
	ended := make([]bool, len(m.inputs))
	idx := make([]int, 0, len(m.inputs))
	for {
		if err := m.r.serve(ctx, nil); err != nil {
			return err
		}
		if err := m.r.fireTimers(); err != nil {
			return err
		}
		cases = cases[:firstInput]
		idx = idx[:0]
		for i, in := range m.inputs {
			if !ended[i] && !m.aligner.Blocked(i) {
				cases = append(cases, in.recvCase())
				idx = append(idx, i)
			}
		}
		var tm *time.Timer
		cases[caseTimer] = reflect.SelectCase{Dir: reflect.SelectRecv}
		if at, ok := m.r.nextTimer(); ok {
			tm = time.NewTimer(at.Sub(m.t.now()))
			cases[caseTimer].Chan = reflect.ValueOf(tm.C)
		}
		chosen, v, ok := reflect.Select(cases)
		if tm != nil {
			tm.Stop()
		}
		switch chosen {
		case caseMail, caseTimer:
			continue
		case caseDone:
			return ctx.Err()
		}
		i := idx[chosen-firstInput]
		if !ok {
			return fmt.Errorf("operator %s: input %d closed without end", m.name, i)
		}
		c, err := m.inputs[i].handle(v)
		if err != nil {
			return err
		}
		var actions []align.Action
		switch {
		case c.wm != nil:
			if w, ok := m.wms.update(i, *c.wm); ok {
				if err := m.op.watermark(w); err != nil {
					return err
				}
			}
		case c.barrier != 0:
			actions = m.aligner.Barrier(i, c.barrier, time.Now())
		case c.end:
			ended[i] = true
			actions = m.aligner.End(i, time.Now())
		}
		done, err := m.apply(actions)
		if err != nil {
			return err
		}
		if done {
			// The inputs end only after the final checkpoint completed, and
			// its completion was posted before: let the sinks commit it.
			return m.r.serve(ctx, nil)
		}
		if err := m.r.flush(); err != nil {
			return err
		}
	}
}

// restoreWatermark starts the combined watermark from the checkpoint's: an
// input that has sent none yet holds it there, not below.
func (m *multiRoot) restoreWatermark() {
	if a := m.t.restoredAck(m.name); a != nil && a.Watermark != nil {
		m.wms.out, m.wms.sent = wmark{ts: *a.Watermark}, true
	}
}

func (m *multiRoot) apply(actions []align.Action) (done bool, err error) {
	for _, a := range actions {
		switch a := a.(type) {
		case align.Snapshot:
			if err := m.op.snapshot(a.ID, a.Alignment); err != nil {
				return false, err
			}
			m.t.observer.Alignment(m.t.job, m.t.id, m.name, a.ID, a.Alignment)
		case align.Abort:
			m.t.decline(a.ID, fmt.Errorf("operator %s: alignment of checkpoint %d given up: %s", m.name, a.ID, a.Reason))
		case align.EndOfInput:
			if err := m.op.end(); err != nil {
				return false, err
			}
			return true, m.r.flush()
		case align.Block, align.Unblock:
			// The aligner keeps the blocked set; run asks it each loop.
		}
	}
	return false, nil
}

// newInput makes the channel for input idx of multi-input node n and
// registers its sending end as the node's endpoint for that input.
func newInput[T any](t *task, n *node, idx int, target func(vals []T, pos []Position) error) input {
	ch := make(chan *message[T], t.cfg.ChannelCapacity)
	// Consumers are built before their producers, and every root exists
	// before any node is built, so the sending end can be wired now.
	producer := t.rootOf(n.inputs[idx])
	s := newSender(t.ctx, ch, &producer.cursor, t.cfg.BatchSize)
	producer.flushers = append(producer.flushers, s)
	t.endpoints[n.id][idx] = s
	return &typedInput[T]{ch: ch, target: target}
}

// --- Union ----------------------------------------------------------------

type unionOp[T any] struct {
	opBase
	out endpoint[T]
	wms *inputWatermarks
}

func (u *unionOp[T]) snapshot(id checkpoint.ID, alignment time.Duration) error {
	a := checkpoint.Ack{Operator: u.name, Alignment: alignment}
	if u.wms.out.ts != noWatermark {
		wm := u.wms.out.ts
		a.Watermark = &wm
	}
	u.t.ack(id, a)
	return u.out.barrier(id)
}

func (u *unionOp[T]) watermark(w wmark) error { return u.out.watermark(w) }

func (u *unionOp[T]) end() error { return u.out.end() }

// Union adds an operator that merges streams of one type. It aligns
// barriers across its inputs.
func Union[T any](name string, ins ...*Port[T]) *Port[T] {
	if len(ins) == 0 {
		panic("runtime.Union: no input") // a programming error, caught at build by stream
	}
	g := ins[0].g
	nodes := make([]*node, len(ins))
	for i, in := range ins {
		nodes[i] = in.n
		if in.g != g {
			g.errorf("union %q: input %d belongs to another job", name, i)
		}
	}
	n := g.add(name, kindMulti, nodes...)
	if len(ins) < 2 {
		g.errorf("union %q: needs at least two inputs, has %d", name, len(ins))
	}
	out := newPort[T](g, n)
	for i, in := range ins {
		connect(in, n, i)
	}
	n.build = func(t *task) error {
		r := t.rootOf(n)
		u := &unionOp[T]{opBase: t.base(n), out: out.output(t)}
		m := &multiRoot{t: t, r: r, name: n.name, aligner: align.New(len(ins), t.cfg.Mode), op: u, wms: newInputWatermarks(len(ins))}
		u.wms = &m.wms
		m.restoreWatermark()
		for i := range ins {
			m.inputs = append(m.inputs, newInput(t, n, i, u.out.collectBatch))
		}
		r.run = m.run
		return nil
	}
	return out
}

// --- Keyed CoProcess ------------------------------------------------------

// CoProcessor is a keyed two-input operator's behaviour.
type CoProcessor[K, In1, In2, Out any] struct {
	Process1 func(ctx *Context[K, Out], in In1) error
	Process2 func(ctx *Context[K, Out], in In2) error
	OnTimer  func(ctx *Context[K, Out], ts time.Time) error
	// OnEventTimer is called when the least watermark of both inputs
	// reaches an event-time timer.
	OnEventTimer func(ctx *Context[K, Out], ts time.Time) error
}

type coProcessOp[K, In1, In2, Out any] struct {
	keyedState
	guard1 keyGuard
	guard2 keyGuard
	key1   func(In1) K
	key2   func(In2) K
	codec  state.Codec[K]
	keyBuf []byte
	proc   CoProcessor[K, In1, In2, Out]
	ctx    Context[K, Out]
	out    endpoint[Out]
}

// setKey makes k the key at hand, once checkKey said that it belongs to
// the task; false: skip the record (set aside, or err).
func (o *coProcessOp[K, In1, In2, Out]) setKey(g *keyGuard, k K) (bool, error) {
	o.keyBuf = o.codec.Append(o.keyBuf[:0], k)
	if ok, err := checkKey(&o.keyedState, g, o.keyBuf, k); !ok {
		return false, err
	}
	o.scope.Set(o.keyBuf)
	o.ctx.key = k
	return true, nil
}

func (o *coProcessOp[K, In1, In2, Out]) apply1(v In1) (err error) {
	defer o.recoverTo(&err)
	if ok, err := o.setKey(&o.guard1, o.key1(v)); !ok {
		return err
	}
	return o.proc.Process1(&o.ctx, v)
}

func (o *coProcessOp[K, In1, In2, Out]) apply2(v In2) (err error) {
	defer o.recoverTo(&err)
	if ok, err := o.setKey(&o.guard2, o.key2(v)); !ok {
		return err
	}
	return o.proc.Process2(&o.ctx, v)
}

func (o *coProcessOp[K, In1, In2, Out]) collect1(v In1) error {
	if err := o.apply1(v); err != nil {
		return o.recordErr(err)
	}
	return nil
}

func (o *coProcessOp[K, In1, In2, Out]) collect2(v In2) error {
	if err := o.apply2(v); err != nil {
		return o.recordErr(err)
	}
	return nil
}

func (o *coProcessOp[K, In1, In2, Out]) snapshot(id checkpoint.ID, alignment time.Duration) error {
	o.keyedState.snapshot(id, alignment)
	return o.out.barrier(id)
}

func (o *coProcessOp[K, In1, In2, Out]) watermark(w wmark) error {
	if o.advance(w) {
		if err := fireEventTimers(&o.keyedState, o.codec, &o.ctx, o.proc.OnEventTimer); err != nil {
			return err
		}
	}
	return o.out.watermark(w)
}

func (o *coProcessOp[K, In1, In2, Out]) end() error { return o.out.end() }

func (o *coProcessOp[K, In1, In2, Out]) fireTimers(now time.Time) error {
	return fireKeyedTimers(&o.keyedState, o.codec, &o.ctx, o.proc.OnTimer, now)
}

// CoProcess adds a keyed operator over two streams keyed alike: both inputs
// share the operator's keyed state. It aligns barriers across its inputs.
func CoProcess[K, In1, In2, Out any](in1 *Keyed[K, In1], in2 *Keyed[K, In2], name string, factory func(s *Setup) (CoProcessor[K, In1, In2, Out], error)) *Port[Out] {
	g := in1.in.g
	if in2.in.g != g {
		g.errorf("coProcess %q: inputs belong to different jobs", name)
	}
	n := g.add(name, kindMulti, in1.in.n, in2.in.n)
	if factory == nil {
		g.errorf("coProcess %q: factory is nil", name)
	}
	// Both inputs' keys address one state, encoded by the first input's
	// codec: keyed by another codec, the second's would find none of it.
	if in1.codec != nil && in2.codec != nil && state.CodecName(in1.codec) != state.CodecName(in2.codec) {
		g.errorf("coProcess %q: its inputs are keyed by different codecs (%s and %s): a key must encode alike on both",
			name, state.CodecName(in1.codec), state.CodecName(in2.codec))
	}
	out := newPort[Out](g, n)
	connect(in1.in, n, 0)
	connect(in2.in, n, 1)
	n.build = func(t *task) error {
		r := t.rootOf(n)
		o := &coProcessOp[K, In1, In2, Out]{guard1: in1.guard(t), guard2: in2.guard(t), key1: in1.keyFn, key2: in2.keyFn, codec: in1.codec, out: out.output(t)}
		o.opBase = t.base(n)
		o.wm = noWatermark
		o.describe("key", state.CodecName(in1.codec))
		if err := o.open(t, n); err != nil {
			return err
		}
		proc, err := callFactory(factory, &Setup{task: t.id, backend: o.backend, scope: &o.scope, k: &o.keyedState})
		if err != nil {
			return fmt.Errorf("operator %s: setup: %w", n.name, err)
		}
		if proc.Process1 == nil || proc.Process2 == nil {
			return fmt.Errorf("operator %s: setup must return Process1 and Process2", n.name)
		}
		o.proc = proc
		if proc.OnTimer != nil {
			if err := o.initTimers(); err != nil {
				return err
			}
			t.addTimed(n, o)
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
		m := &multiRoot{t: t, r: r, name: n.name, aligner: align.New(2, t.cfg.Mode), op: o, wms: newInputWatermarks(2)}
		m.restoreWatermark()
		m.inputs = []input{
			newInput(t, n, 0, func(vals []In1, pos []Position) error { return eachRecord(o.cursor, o.collect1, vals, pos) }),
			newInput(t, n, 1, func(vals []In2, pos []Position) error { return eachRecord(o.cursor, o.collect2, vals, pos) }),
		}
		r.run = m.run
		return nil
	}
	return out
}
