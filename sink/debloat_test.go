package sink

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// ackAtRate writes and acknowledges records as a broker that takes rate
// records per second would, for d, in 10 ms steps, keeping the gate full
// (a writer with more to write than the broker takes).
func ackAtRate(t *testing.T, g *inflightGate, c *fakeClock, rate int, d time.Duration) {
	t.Helper()
	per := rate / 100
	for range int(d / (10 * time.Millisecond)) {
		for g.inflight() < g.bound() {
			g.sent()
		}
		c.t = c.t.Add(10 * time.Millisecond)
		for range min(per, int(g.inflight())) {
			g.done()
		}
		g.measure()
	}
}

// TestInflightGateFollowsTheRate: the bound settles at what the measured
// acknowledgement rate clears in the target, down when the broker slows
// (a quota) and up again when it speeds up, within its floor and cap.
func TestInflightGateFollowsTheRate(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	g := newInflightGate(100*time.Millisecond, 1<<20, c.now)
	if got := g.bound(); got != gateStart {
		t.Fatalf("first bound %d, want %d", got, gateStart)
	}
	for _, step := range []struct {
		rate     int
		min, max int64
	}{
		{500_000, 40_000, 60_000}, // fast broker: about 50,000 (0.1 s of it)
		{2_500, gateMin, 400},     // a quota: 250, under the floor
		{200_000, 15_000, 25_000}, // quota lifted: up again
	} {
		ackAtRate(t, g, c, step.rate, 4*time.Second)
		if got := g.bound(); got < step.min || got > step.max {
			t.Errorf("at %d records/s: bound %d, want %d..%d", step.rate, got, step.min, step.max)
		}
	}
	// An idle sink (nothing in flight) keeps its bound.
	for g.inflight() > 0 {
		g.done()
	}
	c.t = c.t.Add(10 * time.Millisecond)
	g.measure()
	before := g.bound()
	for range 10 {
		c.t = c.t.Add(100 * time.Millisecond)
		g.measure()
	}
	if got := g.bound(); got != before {
		t.Errorf("idle: bound %d, was %d", got, before)
	}
	// The cap holds.
	small := newInflightGate(time.Second, 1000, c.now)
	ackAtRate(t, small, c, 1_000_000, time.Second)
	if got := small.bound(); got != 1000 {
		t.Errorf("capped bound %d, want 1000", got)
	}
}

// TestInflightGateWaits: a full gate holds Write until an acknowledgement
// frees a place, or the context ends, or the sink failed; without a
// target it never waits.
func TestInflightGateWaits(t *testing.T) {
	// A clock that stands still: no measurement moves the bound.
	c := &fakeClock{t: time.Unix(0, 0)}
	g := newInflightGate(100*time.Millisecond, 1<<20, c.now)
	for range g.bound() {
		g.sent()
	}
	ok := func() error { return nil }
	released := make(chan error, 1)
	go func() { released <- g.wait(context.Background(), ok) }()
	select {
	case err := <-released:
		t.Fatalf("a full gate let a write through: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	g.done()
	select {
	case err := <-released:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an acknowledgement did not release the writer")
	}

	for range g.checkEvery() { // full again, and time to look
		g.sent()
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.wait(ctx, ok); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait with a cancelled context: %v", err)
	}
	boom := errors.New("boom")
	if err := g.wait(context.Background(), func() error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("wait on a failed sink: %v", err)
	}

	off := newInflightGate(0, 1<<20, time.Now)
	for range 10 * gateStart {
		off.sent()
	}
	if err := off.wait(context.Background(), ok); err != nil {
		t.Fatalf("a gate without a target waited: %v", err)
	}
}

// TestInflightGatePacesAfterAThrottle: no pace until the broker throttles;
// a throttle sets the pace to a little under what the broker took over
// its quota window, the holds counted; writes then wait for the pace's
// tokens; windows without a throttle raise it slowly; paceForget without
// one ends the pacing.
func TestInflightGatePacesAfterAThrottle(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	g := newInflightGate(time.Second, 1<<20, c.now)
	// 11 s at 1,000 records/s (acknowledged at once), no throttle.
	ackAtRate(t, g, c, 1000, 11*time.Second)
	if g.pace != 0 || g.paceDelay() != 0 {
		t.Fatalf("paced (%v) without a throttle", g.pace)
	}
	// A throttle of 2 s after 11 s at 1,000 records/s: Kafka holds a
	// client for the time its excess takes at the quota, so the quota is
	// 11,000 records over 13 s.
	g.sent()
	g.done()
	g.throttle(2 * time.Second)
	c.t = c.t.Add(gateWindow)
	g.measure()
	if want := paceMargin * 11000 / 13; g.pace < want*0.95 || g.pace > want*1.05 {
		t.Fatalf("pace %.0f records/s after the throttle, want about %.0f", g.pace, want)
	}
	// Held: windows inside the hold neither raise the pace nor take the
	// rate down.
	pace, rate := g.pace, g.rate
	g.sent()
	c.t = c.t.Add(gateWindow)
	g.measure()
	if g.pace != pace || g.rate != rate {
		t.Errorf("inside the hold: pace %.0f -> %.0f, rate %.0f -> %.0f; want both kept", pace, g.pace, rate, g.rate)
	}
	// Writes keep to the pace: 900 records past the burst wait about a
	// second.
	g.tokens, g.refilled = 0, c.t
	g.sinceCheck = int64(g.pace)
	if d := g.paceDelay(); d < 900*time.Millisecond || d > 1100*time.Millisecond {
		t.Errorf("%d records at once: wait %v, want about 1 s at %.0f records/s", g.sinceCheck, d, g.pace)
	}
	g.sinceCheck = 0
	// Past the hold, windows without a throttle raise it by paceProbe a
	// second.
	for g.held(c.t.Add(gateWindow)) {
		g.sent()
		c.t = c.t.Add(gateWindow)
		g.done()
		g.measure()
	}
	if g.pace != pace {
		t.Errorf("inside the hold: pace %.1f -> %.1f, want it kept", pace, g.pace)
	}
	g.sent()
	c.t = g.heldEnd().Add(gateWindow / 2)
	g.done()
	before, dt := g.pace, c.t.Sub(g.since)
	g.measure()
	if want := before * math.Pow(paceProbe, dt.Seconds()); g.pace <= before || g.pace < want*0.999 || g.pace > want*1.001 {
		t.Errorf("a window without a throttle: pace %.1f -> %.1f, want %.1f", before, g.pace, want)
	}
	// paceForget without a throttle: no pace.
	for range int(paceForget/gateWindow) + 2 {
		g.sent()
		c.t = c.t.Add(gateWindow)
		g.done()
		g.measure()
	}
	if g.pace != 0 || g.paceDelay() != 0 {
		t.Errorf("%v without a throttle: still paced at %.0f records/s", paceForget, g.pace)
	}
}

// TestInflightGatePacesAtAKnownQuota: told the producer quota of its
// client id, the gate paces at the first measurement, before any
// throttle, at 0.9 of the quota in records of the size written.
func TestInflightGatePacesAtAKnownQuota(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	g := newInflightGate(time.Second, 1<<20, c.now)
	g.knowQuota(150000)
	for range 300 {
		g.sent()
		g.sized(34)
		g.done()
	}
	g.measure()
	c.t = c.t.Add(gateWindow)
	g.measure()
	if want := paceMargin * 150000 / (34 + recordOverheadBytes); g.pace < want*0.999 || g.pace > want*1.001 {
		t.Fatalf("pace %.0f records/s for records of 34 bytes, want %.0f", g.pace, want)
	}
}

// TestInflightGatePacesAYoungSinkAtItsFirstThrottle: Kafka measures a
// client younger than its window as if it had written for all but one
// sample of it (10 s), so a sink that writes at 3,000 records/s against a
// quota of about 1,800 is first throttled after 6 s, briefly. That first
// throttle must pace it at the quota: the rate it wrote at would run it
// into holds of seconds (its checkpoints waited 5 s at the start of a
// quota run).
func TestInflightGatePacesAYoungSinkAtItsFirstThrottle(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	g := newInflightGate(time.Second, 1<<20, c.now)
	ackAtRate(t, g, c, 3000, 6*time.Second)
	g.sent()
	g.done()
	g.throttle(50 * time.Millisecond)
	c.t = c.t.Add(gateWindow)
	g.measure()
	// 18,000 records in a window Kafka counts as 10 s, held 50 ms.
	if want := paceMargin * 18000 / 10.05; g.pace < want*0.95 || g.pace > want*1.05 {
		t.Fatalf("pace %.0f records/s after the first throttle, want about %.0f (the quota's 0.9)", g.pace, want)
	}
}

// TestInflightGateIgnoresAThrottleAfterAnIdleSpell: a throttle of a burst
// that the measurement after an idle spell counts says nothing of the
// rate now, and sets no pace (it set the pace to its floor, 32 records/s,
// for 30 s); a long pace's wait sees a failure within a window.
func TestInflightGateIgnoresAThrottleAfterAnIdleSpell(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	g := newInflightGate(time.Second, 1<<20, c.now)
	ackAtRate(t, g, c, 5000, 2*time.Second)
	g.throttle(500 * time.Millisecond)
	for g.inflight() > 0 {
		g.done()
	}
	c.t = c.t.Add(time.Minute)
	g.sent()
	g.done()
	g.sent()
	g.measure()
	if g.pace != 0 {
		t.Fatalf("paced at %.0f records/s by a throttle before a minute idle", g.pace)
	}
	// Paced slowly, a wait for many writes looks at failed every window.
	g.pace, g.tokens, g.refilled = 10, 0, c.t
	g.sinceCheck = 1000
	start := time.Now()
	boom := errors.New("boom")
	if err := g.wait(context.Background(), func() error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("paced wait: %v, want the sink's failure", err)
	}
	if d := time.Since(start); d > 5*gateWindow {
		t.Errorf("a paced wait took %v to see the failure, want about a window (%v)", d, gateWindow)
	}
}

// heldEnd is when the gate's last throttle ends.
func (g *inflightGate) heldEnd() time.Time {
	return g.origin.Add(time.Duration(g.heldUntil.Load()))
}

// TestInflightGateKeepsToItsShare: gates that share an InFlightBudget
// each keep their bound to an even share of it, however fast the broker,
// and a share grows again when writers leave; a share is never below
// MinInFlightShare.
func TestInflightGateKeepsToItsShare(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	b := NewInFlightBudget(40_000)
	var gates []*inflightGate
	var leaves []func()
	for range 8 {
		g := newInflightGate(time.Second, 1<<20, c.now)
		g.budget = b
		gates = append(gates, g)
		leaves = append(leaves, b.join())
	}
	ackAtRate(t, gates[0], c, 1_000_000, time.Second) // alone it would hold 1,000,000
	if got := gates[0].bound(); got != 5_000 {
		t.Fatalf("one of 8 writers on a budget of 40,000: bound %d, want 5,000", got)
	}
	for _, leave := range leaves[2:] {
		leave()
		leave() // twice: counted once
	}
	ackAtRate(t, gates[0], c, 1_000_000, time.Second)
	if got := gates[0].bound(); got != 20_000 {
		t.Fatalf("one of 2 writers: bound %d, want 20,000", got)
	}
	for range 100 {
		b.join()
	}
	ackAtRate(t, gates[0], c, 1_000_000, time.Second)
	if got := gates[0].bound(); got != MinInFlightShare {
		t.Fatalf("one of 102 writers: bound %d, want the least share %d", got, MinInFlightShare)
	}
	// A slow broker still sets a bound under the share.
	ackAtRate(t, gates[1], c, 2_000, 4*time.Second)
	if got := gates[1].bound(); got > 3_000 {
		t.Errorf("at 2,000 records/s: bound %d, want about 2,000", got)
	}
}
