package worker

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// TestGCPercentFor: 400% of a small live heap, then 128 MiB of growth
// past it, twice the live heap from 64 MiB live, 512 MiB from 256 MiB
// live, never under Go's 100%.
func TestGCPercentFor(t *testing.T) {
	for _, tc := range []struct {
		live uint64
		want int
	}{
		{0, DefaultGCPercent},
		{16 << 20, DefaultGCPercent},
		{32 << 20, DefaultGCPercent},
		{40 << 20, 320},
		{64 << 20, 200},
		{160 << 20, 200},
		{256 << 20, 200},
		{384 << 20, 133},
		{512 << 20, 100},
		{2 << 30, 100},
	} {
		if got := gcPercentFor(tc.live); got != tc.want {
			t.Errorf("gcPercentFor(%d MiB) = %d, want %d", tc.live>>20, got, tc.want)
		}
	}
}

// TestGCTargetFollowsLiveHeap: after a collection that finds a large live
// heap the target drops to Go's 100%; once the heap is small again, it is
// back at DefaultGCPercent.
func TestGCTargetFollowsLiveHeap(t *testing.T) {
	current := func() int { p := debug.SetGCPercent(100); debug.SetGCPercent(p); return p }
	defer debug.SetGCPercent(current())
	tuneGCToLiveHeap()
	waitFor := func(want int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for current() != want {
			if time.Now().After(deadline) {
				t.Fatalf("GC percent %d, want %d (live heap %d MiB)", current(), want, liveHeap()>>20)
			}
			runtime.GC()
			time.Sleep(10 * time.Millisecond)
		}
	}
	big := make([]byte, maxGCGrowth+64<<20)
	for i := 0; i < len(big); i += 4096 {
		big[i] = byte(i) // touched, so it is a live heap a collection measures
	}
	waitFor(100)
	runtime.KeepAlive(big)
	big = nil
	waitFor(DefaultGCPercent)
}
