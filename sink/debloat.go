package sink

import (
	"context"
	"sync/atomic"
	"time"
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
)

// inflightGate bounds the records written and not yet acknowledged. sent
// and wait run on the writer's goroutine, done on the client's. The writer
// counts what it wrote on its own; the client's goroutines count
// acknowledgements in a counter of their own cache line; the writer reads
// it every few writes, so the bound can be passed by that few.
type inflightGate struct {
	target time.Duration // 0: no bound
	max    int64
	now    func() time.Time

	_       [64]byte
	acked   atomic.Int64
	_       [56]byte
	waiting atomic.Bool // the writer waits: acknowledgements wake it
	_       [63]byte
	wake    chan struct{}

	// The writer's alone.
	written    int64
	sinceCheck int64
	limit      int64
	since      time.Time
	fromAcked  int64
	rate       float64 // records per second, smoothed
}

func newInflightGate(target time.Duration, max int64, now func() time.Time) *inflightGate {
	g := &inflightGate{target: target, max: max, now: now, wake: make(chan struct{}, 1)}
	g.limit = min(gateStart, max) // set by the first measurements
	return g
}

// sent counts a record written.
func (g *inflightGate) sent() { g.written++; g.sinceCheck++ }

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

// inflight is the records written and not yet acknowledged.
func (g *inflightGate) inflight() int64 { return g.written - g.acked.Load() }

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
	if g.inflight() < g.limit {
		g.sinceCheck = 0
		return nil
	}
	g.waiting.Store(true)
	defer g.waiting.Store(false)
	t := time.NewTimer(gateWindow)
	defer t.Stop()
	// Looked at again after waiting is set: an acknowledgement before it
	// found no one to wake.
	for g.inflight() >= g.limit {
		select {
		case <-g.wake:
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			t.Reset(gateWindow)
			g.measure()
		}
		if err := failed(); err != nil {
			return err
		}
	}
	g.sinceCheck = 0
	return nil
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
	g.since, g.fromAcked = now, acked
	if n == 0 && g.written == acked {
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
	g.limit = min(max(int64(g.rate*g.target.Seconds()), gateMin), g.max)
}

// bound is the current bound (for tests and logs).
func (g *inflightGate) bound() int64 { return g.limit }
