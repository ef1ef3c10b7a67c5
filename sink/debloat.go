package sink

import (
	"context"
	"math"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Output in flight is bounded by time, not by count (Flink's buffer
// debloating, applied to the sink). A barrier's pre-commit flushes the
// open transaction: it waits until every record written so far is
// acknowledged. With only the producer's buffer as the bound (10,000
// records by default), a broker that takes the sink's records slowly (a
// producer quota, a loaded disk) made each barrier wait for seconds of
// output: at 150 KB/s, 7 to 12 s a checkpoint. The gate keeps the records
// written and not yet acknowledged to what the measured acknowledgement
// rate clears in the target (the checkpoint interval), so a flush takes
// about that long at most; Write waits when the gate is full, which is
// backpressure: the task reads no more input meanwhile. The bound follows
// the rate both ways: when acknowledgements come faster, the next
// measurement raises it.

const (
	// gateMin is the least bound. Small: the bounds of a worker's tasks
	// add up against a broker quota (one per client id), and the first
	// measurements raise it fast where the broker is fast (each by about
	// the target over the round trip).
	gateMin = 32
	// gateWindow is the least time a rate measurement spans.
	gateWindow = 100 * time.Millisecond
	// gateStart is the first bound, until the first measurement: about
	// what a fast broker acknowledges in one round trip, and little
	// against a quota (50 KB at 100 bytes a record). Starting at gateMin
	// held a task to a few thousand records a second for the first
	// fraction of a second, a tenth of a five-second run.
	gateStart = 512
	// gateCheckMax is the most writes between two looks at the records in
	// flight: a look reads a counter the client's goroutines write, a
	// cache line two cores pass back and forth, too dear for every record
	// (it cost a third of the 1 s throughput when every write and every
	// acknowledgement touched shared counters).
	gateCheckMax = 64
	// paceBurst is how much output ahead of its pace a paced sink may
	// write at once.
	paceBurst = 50 * time.Millisecond
	// paceForget is how long a paced sink goes without a throttle before
	// it stops pacing (the quota was lifted, or was another client's).
	paceForget = 30 * time.Second
	// paceHorizon is the span a pace is measured over: Kafka's quota
	// window (quota.window.num samples of quota.window.size.seconds, 11 s
	// by default), over which a throttle brings the client's rate to the
	// quota.
	paceHorizon = 11 * time.Second
	// recordOverheadBytes is about what a record adds in a produce
	// request to its key, value and headers (its length, attributes,
	// deltas, and its share of the batch's header).
	recordOverheadBytes = 16
	// paceWindowMin is the shortest window Kafka measures a client's rate
	// over: quota.window.num - 1 samples of quota.window.size.seconds,
	// while the client is younger than that.
	paceWindowMin = 10 * time.Second
	// paceIdle is the longest window a pace is measured from: a longer
	// one is a sink that wrote nothing meanwhile.
	paceIdle = time.Second
	// paceProbe is how much a paced sink raises its pace a second
	// without a throttle: it finds a raised quota, and the pace that the
	// first throttles set too low. It was 2% a window (a measurement,
	// 100 ms), 22% a second: 11 s after a throttle the pace was 8 times
	// the quota, and the broker held the sink for 4 s (chains of 1 s
	// throttles, Kafka's longest). At 3% a second a pace set at 0.9 of
	// the quota reaches it in about 4 s, and the throttle there is short.
	paceProbe = 1.03
	// paceMargin is the share of the broker's measured rate a throttle
	// sets the pace to: below the quota, so the debt of the window drains.
	paceMargin = 0.9
)

// A broker quota is not slowness: Kafka answers a client over its quota at
// once and then holds the client's next request for the throttle time,
// the time the excess of its last window of samples (11 s by default)
// takes at the quota. The acknowledgements come fast, so a bound on the
// records in flight does not bound the rate, and the rate measured from
// them is far above the quota: under a 150 KB/s quota at 1 s checkpoints,
// the writer filled the producer, the broker held it for 6 to 8.5 s, and
// every tenth checkpoint waited that long. So a throttle also sets a pace:
// a little under the quota, which the throttle tells: what the client
// wrote over the broker's window (paceHorizon, at least paceWindowMin),
// over the window and the hold. Writes then keep to the pace (a token
// bucket), raised by paceProbe a second until the next throttle, and
// forgotten after paceForget without one.

// inflightGate bounds the records written and not yet acknowledged. sent
// and wait run on the writer's goroutine, done on the client's. The writer
// counts what it wrote on its own; the client's goroutines count
// acknowledgements in a counter of their own cache line; the writer reads
// it every few writes, so the bound can be passed by that few.
type inflightGate struct {
	target time.Duration // 0: no bound
	max    int64
	budget *InFlightBudget // nil: none
	now    func() time.Time

	_       [64]byte
	acked   atomic.Int64
	_       [56]byte
	waiting atomic.Bool // the writer waits: acknowledgements wake it
	_       [63]byte
	wake    chan struct{}
	// throttled is the longest throttle the broker imposed since the last
	// measurement (nanoseconds), heldUntil when the last one ends
	// (nanoseconds since origin, on the monotonic clock: a wall clock set
	// back by minutes must not read as a hold of minutes; see throttle).
	throttled atomic.Int64
	heldUntil atomic.Int64
	origin    time.Time
	// quota is the producer quota the broker applies to the client id
	// (bytes per second, as float64 bits), 0 while unknown or none: the
	// first measurement paces the sink at it, before a throttle says it.
	quota atomic.Uint64

	// The writer's alone.
	written    int64
	sinceCheck int64
	limit      int64
	since      time.Time
	fromAcked  int64
	rate       float64 // records per second, smoothed
	// pace is the rate a throttle set (records per second), 0 if none;
	// tokens the writes it allows now, as of refilled.
	pace         float64
	lastThrottle time.Time
	tokens       float64
	refilled     time.Time
	// bytes is the size of the records written; quotaPaced says the
	// quota set the pace once.
	bytes      int64
	quotaPaced bool
	// history holds the acknowledged count at each measurement of the
	// last paceHorizon, oldest first; young says it goes back to the
	// gate's first write (no idle spell cleared it).
	history []ackSample
	young   bool
}

type ackSample struct {
	at    time.Time
	acked int64
}

func newInflightGate(target time.Duration, max int64, now func() time.Time) *inflightGate {
	g := &inflightGate{target: target, max: max, now: now, wake: make(chan struct{}, 1), origin: now(), young: true}
	g.limit = min(gateStart, max) // set by the first measurements
	return g
}

// sent counts a record written.
func (g *inflightGate) sent() { g.written++; g.sinceCheck++ }

// sized counts the bytes of a record written.
func (g *inflightGate) sized(n int) { g.bytes += int64(n) }

// knowQuota tells the gate the quota the broker applies to its client id,
// bytes per second. Any goroutine.
func (g *inflightGate) knowQuota(bytesPerSecond float64) {
	g.quota.Store(math.Float64bits(bytesPerSecond))
}

// done counts a record acknowledged (or failed).
func (g *inflightGate) done() {
	g.acked.Add(1)
	if g.waiting.Load() {
		select {
		case g.wake <- struct{}{}:
		default:
		}
	}
}

// throttle counts a throttle of d the broker imposed on the producer.
// Called on the client's goroutines.
func (g *inflightGate) throttle(d time.Duration) {
	if d <= 0 {
		return
	}
	// The longest of a window's throttles: every response of the
	// client's requests in flight (its slots', its brokers') carries the
	// same hold.
	for {
		old := g.throttled.Load()
		if old >= int64(d) || g.throttled.CompareAndSwap(old, int64(d)) {
			break
		}
	}
	until := int64(g.now().Add(d).Sub(g.origin))
	for {
		old := g.heldUntil.Load()
		if old >= until || g.heldUntil.CompareAndSwap(old, until) {
			return
		}
	}
}

// held says whether a throttle holds the producer at now.
func (g *inflightGate) held(now time.Time) bool {
	return int64(now.Sub(g.origin)) < g.heldUntil.Load()
}

// inflight is the records written and not yet acknowledged.
func (g *inflightGate) inflight() int64 { return g.written - g.acked.Load() }

// drain returns once every record written has had its promise run, or
// with ctx's error. A flush needs it after the client's Flush, which
// waits only for the records franz-go buffered: a record it fails before
// buffering it (larger than its buffer, produced outside a transaction,
// its client closing) has its promise run on a goroutine of its own,
// possibly after Flush returned, and a pre-commit that looked for
// failures before that promise ran would vouch for a transaction without
// the record.
func (g *inflightGate) drain(ctx context.Context) error {
	if g.inflight() <= 0 {
		return nil
	}
	return g.await(ctx, func() bool { return g.inflight() <= 0 }, nil, nil)
}

// await returns once done holds, looked at whenever an acknowledgement
// wakes the writer, or with ctx's error or failed's (if not nil, looked
// at after each wake). tick (if not nil) runs each window that passes
// without one.
func (g *inflightGate) await(ctx context.Context, done func() bool, tick func(), failed func() error) error {
	g.waiting.Store(true)
	defer g.waiting.Store(false)
	t := time.NewTimer(gateWindow)
	defer t.Stop()
	// Looked at again after waiting is set: an acknowledgement before it
	// found no one to wake.
	for !done() {
		select {
		case <-g.wake:
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			t.Reset(gateWindow)
			if tick != nil {
				tick()
			}
		}
		if failed != nil {
			if err := failed(); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkEvery is how many writes pass between looks at the records in
// flight: an eighth of the bound, at most gateCheckMax.
func (g *inflightGate) checkEvery() int64 { return min(max(g.limit/8, 1), gateCheckMax) }

// wait returns once one more record may be written, or with ctx's error
// or failed's.
func (g *inflightGate) wait(ctx context.Context, failed func() error) error {
	if g.target <= 0 || g.sinceCheck < g.checkEvery() {
		return nil
	}
	g.measure()
	if d := g.paceDelay(); d > 0 {
		g.sinceCheck = 0 // taken from the tokens
		if err := g.paceWait(ctx, d, failed); err != nil {
			return err
		}
	}
	if g.inflight() < g.limit {
		g.sinceCheck = 0
		return nil
	}
	if err := g.await(ctx, func() bool { return g.inflight() < g.limit }, g.measure, failed); err != nil {
		return err
	}
	g.sinceCheck = 0
	return nil
}

// paceWait waits d, then as long as the pace's tokens are owed, a window
// at a time with failed looked at in between: a slow pace (a small quota)
// can owe seconds.
func (g *inflightGate) paceWait(ctx context.Context, d time.Duration, failed func() error) error {
	for d > 0 {
		t := time.NewTimer(min(d, gateWindow))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		if err := failed(); err != nil {
			return err
		}
		g.measure() // a window at a time, as when writing
		d = g.paceDelay()
	}
	return nil
}

// paceDelay takes the writes since the last look from the pace's tokens
// and returns how long the writer must wait for them, 0 if it need not
// (or the sink is not paced).
func (g *inflightGate) paceDelay() time.Duration {
	if g.pace == 0 {
		return 0
	}
	now := g.now()
	if !g.refilled.IsZero() {
		g.tokens += g.pace * now.Sub(g.refilled).Seconds()
	}
	g.refilled = now
	g.tokens = min(g.tokens, max(g.pace*paceBurst.Seconds(), float64(gateCheckMax)))
	g.tokens -= float64(g.sinceCheck)
	if g.tokens >= 0 {
		return 0
	}
	return time.Duration(-g.tokens / g.pace * float64(time.Second))
}

// measure updates the rate, if a window passed, and the bound from it. It
// runs at every look at the records in flight: a clock read every few
// dozen records.
// A window without writes in flight or acknowledgements (the task had no
// output) leaves both as they are: an idle sink's rate says nothing of
// what the broker takes.
func (g *inflightGate) measure() {
	now := g.now()
	if g.since.IsZero() {
		g.since, g.fromAcked = now, g.acked.Load()
		return
	}
	dt := now.Sub(g.since)
	if dt < gateWindow {
		return
	}
	acked := g.acked.Load()
	n := acked - g.fromAcked
	// A long window is an idle spell unless a hold ended within
	// paceIdle of its end: the writer waited for the broker then (in
	// the gate, or in a barrier's flush), and what it measures is the
	// hold's.
	idle := now.Sub(g.origin)-time.Duration(g.heldUntil.Load()) > paceIdle
	g.since, g.fromAcked = now, acked
	throttled := time.Duration(g.throttled.Swap(0))
	g.setPace(now, n, dt, throttled, idle)
	if n == 0 && g.written == acked {
		return
	}
	if throttled == 0 && g.held(now) {
		// Held by a throttle a measurement counted already: no
		// acknowledgement comes, and the rate is what it took in.
		return
	}
	// Smoothed: under a quota the broker answers in bursts, after
	// throttling pauses. Up by half the difference, down by a quarter:
	// a bound the gate itself held the rate to is left fast.
	r := float64(n) / dt.Seconds()
	switch {
	case g.rate == 0:
		g.rate = r
	case r > g.rate:
		g.rate += (r - g.rate) / 2
	default:
		g.rate += (r - g.rate) / 4
	}
	g.limit = min(max(int64(g.rate*g.target.Seconds()), gateMin), g.ceiling())
}

// ceiling is the most the limit may be: the gate's own, or the share of
// the budget it keeps to.
func (g *inflightGate) ceiling() int64 {
	if g.budget == nil {
		return g.max
	}
	return min(g.max, g.budget.share())
}

// setPace sets the pace from a window of dt in which n records were
// acknowledged and the broker imposed throttles of throttled.
func (g *inflightGate) setPace(now time.Time, n int64, dt, throttled time.Duration, idle bool) {
	acked := g.acked.Load()
	if dt > paceIdle && idle {
		// The sink wrote nothing for a while: the window says nothing of
		// a rate, nor does a throttle of the burst before it, long over.
		g.history = append(g.history[:0], ackSample{now, acked})
		g.young = false
		return
	}
	g.history = append(g.history, ackSample{now, acked})
	drop := 0
	for drop < len(g.history)-1 && now.Sub(g.history[drop+1].at) >= paceHorizon {
		drop++
	}
	g.history = g.history[drop:]
	if q := math.Float64frombits(g.quota.Load()); q > 0 && !g.quotaPaced && g.pace == 0 && g.written > 0 && throttled == 0 {
		// The quota, known before a throttle: a sink that starts at
		// full speed runs far past it before the broker's window (10 s
		// for a young client) shows it, and then owes seconds. Paced as
		// a throttle would, and as it then would, forgotten after
		// paceForget without one.
		g.quotaPaced = true
		perRecord := float64(g.bytes)/float64(g.written) + recordOverheadBytes
		g.pace = max(paceMargin*q/perRecord, float64(gateMin)/g.target.Seconds())
		g.lastThrottle = now
		return
	}
	switch {
	case throttled > 0:
		// Kafka holds a client for the time its excess takes at the
		// quota: the bytes of its window (quota.window.num samples, and
		// never shorter than all but one of them, however young the
		// client) less the quota's share, over the quota. So the quota
		// is what the window took over the window and the hold. A sink
		// that started fast is paced at its first throttle, however
		// short: its excess is what the hold says, not what it wrote.
		first := g.history[0]
		window := now.Sub(first.at)
		if g.young {
			// Kafka's window of a client younger than it.
			window = max(window, paceWindowMin)
		}
		q := float64(acked-first.acked) / (window + throttled).Seconds()
		if now.Sub(first.at) <= dt {
			// No history before this window (after an idle spell).
			q = float64(n) / (dt + throttled).Seconds()
		}
		q = max(q*paceMargin, float64(gateMin)/g.target.Seconds())
		if g.pace == 0 || q < g.pace {
			g.pace = q
		} else {
			g.pace += (q - g.pace) / 2
		}
		g.lastThrottle = now
	case g.pace == 0:
	case now.Sub(g.lastThrottle) > paceForget:
		g.pace, g.tokens, g.refilled = 0, 0, time.Time{}
	case !g.held(now):
		g.pace *= math.Pow(paceProbe, dt.Seconds())
	}
}

// bound is the current bound (for tests and logs).
func (g *inflightGate) bound() int64 { return g.limit }

// throttleHook tells a gate of the throttles its producers' broker imposes.
type throttleHook struct{ g *inflightGate }

var _ kgo.HookBrokerThrottle = throttleHook{}

func (h throttleHook) OnBrokerThrottle(_ kgo.BrokerMetadata, d time.Duration, _ bool) {
	h.g.throttle(d)
}
