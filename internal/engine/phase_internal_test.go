package engine

import (
	"slices"
	"testing"
	"time"
)

// TestTriggerPhaseSpreadsTasks: the tasks of a worker take their periodic
// checkpoints at phases spread over the interval, for any task count: no
// two closer than a quarter of an even share.
func TestTriggerPhaseSpreadsTasks(t *testing.T) {
	const interval = 100 * time.Millisecond
	for _, n := range []int{2, 3, 4, 8, 24, 64, 256} {
		var ps []time.Duration
		for id := range n {
			p := triggerPhase(id, interval)
			if p < 0 || p >= interval {
				t.Fatalf("task %d of %d: phase %v outside [0, %v)", id, n, p, interval)
			}
			ps = append(ps, p)
		}
		slices.Sort(ps)
		gap := ps[0] + interval - ps[n-1] // around the end
		for i := 1; i < n; i++ {
			gap = min(gap, ps[i]-ps[i-1])
		}
		if even := interval / time.Duration(n); gap < even/4 {
			t.Errorf("%d tasks: two phases %v apart, an even share is %v", n, gap, even)
		}
	}
	if p := triggerPhase(5, 0); p != 0 {
		t.Errorf("no interval: phase %v, want 0", p)
	}
}
