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
	// gateEvery is how many writes pass between measurements that the
	// gate is not full for.
	gateEvery = 1024
)

// inflightGate bounds the records written and not yet acknowledged. sent
// and wait run on the writer's goroutine, done on the client's.
type inflightGate struct {
	target time.Duration // 0: no bound
	max    int64
	now    func() time.Time

	inflight atomic.Int64
	acked    atomic.Int64
	limit    atomic.Int64
	wake     chan struct{}

	// The writer's measurement.
	since     time.Time
	fromAcked int64
	rate      float64 // records per second, smoothed
	writes    int
}

func newInflightGate(target time.Duration, max int64, now func() time.Time) *inflightGate {
	g := &inflightGate{target: target, max: max, now: now, wake: make(chan struct{}, 1)}
	g.limit.Store(min(gateMin, max)) // raised by the first measurements
	return g
}

// sent counts a record written.
func (g *inflightGate) sent() { g.inflight.Add(1) }

// done counts a record acknowledged (or failed).
func (g *inflightGate) done() {
	n := g.inflight.Add(-1)
	g.acked.Add(1)
	if n < g.limit.Load() {
		select {
		case g.wake <- struct{}{}:
		default:
		}
	}
}

// wait returns once one more record may be written, or with ctx's error
// or failed's.
func (g *inflightGate) wait(ctx context.Context, failed func() error) error {
	if g.target <= 0 {
		return nil
	}
	if g.writes++; g.writes >= gateEvery {
		g.measure()
	}
	if g.inflight.Load() < g.limit.Load() {
		return nil
	}
	t := time.NewTimer(gateWindow)
	defer t.Stop()
	for g.inflight.Load() >= g.limit.Load() {
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
	return nil
}

// measure updates the rate, if a window passed, and the bound from it.
// A window without writes in flight or acknowledgements (the task had no
// output) leaves both as they are: an idle sink's rate says nothing of
// what the broker takes.
func (g *inflightGate) measure() {
	g.writes = 0
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
	if n == 0 && g.inflight.Load() == 0 {
		return
	}
	// Smoothed: under a quota the broker answers in bursts, after
	// throttling pauses.
	r := float64(n) / dt.Seconds()
	if g.rate == 0 {
		g.rate = r
	} else {
		g.rate += (r - g.rate) / 4
	}
	g.limit.Store(min(max(int64(g.rate*g.target.Seconds()), gateMin), g.max))
}

// bound is the current bound (for tests and logs).
func (g *inflightGate) bound() int64 { return g.limit.Load() }
