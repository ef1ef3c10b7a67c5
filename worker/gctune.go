package worker

import (
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"sync"
)

// The collector's target follows the live heap: a worker collects once its
// heap has grown by DefaultGCPercent of the live heap (4 times it), but by
// at most gcHeadroom. A fixed 400% held the count job's 4 tasks at about
// 300 MiB; at 64 tasks, whose consumers' fetch buffers alone are a few
// hundred MiB live, it let the heap reach 2 GiB, against 0.8 GiB with Go's
// default 100% and the same records per second. The target is set again
// after each collection, from the live heap it found, never below 100%.

// gcHeadroom bounds the heap's growth between collections, past Go's own
// 100% of the live heap. At 256 MiB the count job's 4 tasks (40 MiB live)
// peaked at 261 to 332 MiB, over twice the passthrough's 130 to 148; at
// 128 MiB, 227 to 239 (three runs each, alternated; the records/s and CPU
// a record moved less than the host's noise).
const gcHeadroom = 128 << 20

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
	p := int(uint64(gcHeadroom) * 100 / live)
	return min(max(p, 100), DefaultGCPercent)
}
