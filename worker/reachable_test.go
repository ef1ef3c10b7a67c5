package worker

import (
	"context"
	"errors"
	"testing"
	"time"
)

// One probe answers every task that asks within an interval.
func TestReachabilityProbesOncePerInterval(t *testing.T) {
	calls := 0
	fail := true
	r := &reachability{every: time.Hour, probe: func(context.Context) error {
		calls++
		if fail {
			return errors.New("no answer")
		}
		return nil
	}}
	for range 64 {
		if err := r.check(t.Context()); err == nil {
			t.Fatal("a failed probe's answer was lost")
		}
	}
	if calls != 1 {
		t.Fatalf("%d probes for 64 checks within an interval, want 1", calls)
	}
	r.every, fail = 0, false
	if err := r.check(t.Context()); err != nil || calls != 2 {
		t.Fatalf("after the interval: %v after %d probes, want a new probe that answered", err, calls)
	}
}
