package worker

import (
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"sync"
)

// The collector's target follows the live heap: a worker collects once its
// heap has grown by DefaultGCPercent (4 times the live heap) for a small
// one, else by twice the live heap, but by at least minGCGrowth and at
// most maxGCGrowth. The target is set again after each collection, from
// the live heap it found, never below Go's default 100%.
//
// A fixed 400% held the count job's 4 tasks at about 300 MiB; at 64
// tasks, whose consumers' fetch buffers and producers alone are a large
// live heap, it let the heap reach 2 GiB. A fixed growth of 128 MiB past
// the live heap held the 4 tasks (40 MiB live) at 227 to 239 MiB, where
// 256 MiB let them peak at 261 to 332, over twice the passthrough's 130
// to 148 (3 times the live heap, tried too, took them to 270). But at 64
// tasks 128 MiB meant Go's 100%: the collector marked the whole live heap
// once per live heap allocated; marking took 12% of the worker's CPU in
// a profile, write barriers 9%. Growing by twice the live heap there,
// bounded by 512 MiB, took the CPU a record from 1.85, 1.94 and 2.36 to
// 1.58, 1.52 and 1.59 CPU s per million (three runs each, alternated, 8M
// records), for a peak RSS of 922 to 950 MiB against 632 to 750 (the
// passthrough's: 879). The 4 tasks stay under the 128 MiB floor.
const (
	minGCGrowth = 128 << 20
	maxGCGrowth = 512 << 20
	// gcGrowthTimesLive is the growth, in live heaps, between the bounds.
	gcGrowthTimesLive = 2
)

var gcTuner sync.Once

// tuneGCToLiveHeap starts the collector's target at DefaultGCPercent and
// resets it after every collection. Once per process.
func tuneGCToLiveHeap() {
	gcTuner.Do(func() {
		debug.SetGCPercent(DefaultGCPercent)
		armGCHook(&gcSentinel{})
	})
}

// gcSentinel is an object with a finalizer: the collector runs the
// finalizer after a cycle that found it unreachable, which re-arms it on
// a new one, so the hook runs once after every cycle.
type gcSentinel struct{ _ [16]byte }

func armGCHook(s *gcSentinel) {
	runtime.SetFinalizer(s, func(*gcSentinel) {
		debug.SetGCPercent(gcPercentFor(liveHeap()))
		armGCHook(&gcSentinel{})
	})
}

var liveSample = []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}

// liveHeap is the heap the last collection found live, 0 if unknown.
func liveHeap() uint64 {
	s := make([]rtmetrics.Sample, 1)
	copy(s, liveSample)
	rtmetrics.Read(s)
	if s[0].Value.Kind() != rtmetrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// gcPercentFor is the target for a live heap of live bytes.
func gcPercentFor(live uint64) int {
	if live == 0 {
		return DefaultGCPercent
	}
	growth := min(max(gcGrowthTimesLive*live, minGCGrowth), maxGCGrowth)
	p := int(growth * 100 / live)
	return min(max(p, 100), DefaultGCPercent)
}
