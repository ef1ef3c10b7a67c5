package engine_test

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/stream"
)

// event is a record with an event time.
type event struct {
	Key uint64
	TS  int64 // Unix ms
}

// windowCount is one tumbling window's count for a key.
type windowCount struct {
	Key   uint64
	Start int64
	Count int64
	// Emitted is the event time the output carries (the timer's time).
	Emitted int64
}

const (
	etBase   = int64(1_700_000_000_000) // ms
	etStep   = 5                        // ms between records of a task
	etBound  = 300                      // ms: out-of-orderness, the most a record is behind
	etWindow = 1000                     // ms
	etKeys   = 7
)

// etEvent is record i of task p: keys local to the task (as Kafka
// partitioning gives), timestamps out of order by up to etBound, the same
// on every replay.
func etEvent(p int, i int64) event {
	jitter := int64(rand.New(rand.NewPCG(uint64(i), uint64(p))).Uint64N(etBound + 1))
	return event{Key: uint64(i%etKeys)*2 + uint64(p), TS: etBase + i*etStep - jitter}
}

// windowJob counts events per key in tumbling event-time windows with a
// keyed Process and event-time timers. late counts records at or before
// the operator's watermark (none, with this data); fail may fail a record.
func windowJob(t *testing.T, records int64, fail func() error, late, early *atomic.Int64, sink engine.SinkOpener[windowCount]) *engine.Plan {
	job := stream.NewJob("windows")
	src := stream.SourceWithWatermarks(job, "events", stream.GeneratorSource(records, etEvent), stream.Watermarks[event]{
		OutOfOrderness: etBound * time.Millisecond,
		Timestamp:      func(e event, _ stream.Position) time.Time { return time.UnixMilli(e.TS) },
	})
	checked := failing(src, "maybe-fail", fail)
	keyed := stream.KeyByPartitioned(checked, "by-key", func(e event) uint64 { return e.Key }, state.Uint64())
	counts := stream.Process(keyed, "tumbling", func(s *stream.Setup) (stream.Processor[uint64, event, windowCount], error) {
		windows, err := stream.MapState(s, "windows", state.Int64(), state.Int64())
		if err != nil {
			return stream.Processor[uint64, event, windowCount]{}, err
		}
		return stream.Processor[uint64, event, windowCount]{
			Process: func(ctx *stream.Context[uint64, windowCount], e event) error {
				if got := ctx.Timestamp().UnixMilli(); got != e.TS {
					return fmt.Errorf("record's timestamp %d, extracted %d", got, e.TS)
				}
				if wm := ctx.Watermark(); !wm.IsZero() && e.TS <= wm.UnixMilli() {
					late.Add(1)
				}
				start := e.TS - e.TS%etWindow
				n, _, err := windows.Get(start)
				if err != nil {
					return err
				}
				if err := windows.Put(start, n+1); err != nil {
					return err
				}
				return ctx.RegisterEventTimer(time.UnixMilli(start + etWindow - 1))
			},
			OnEventTimer: func(ctx *stream.Context[uint64, windowCount], ts time.Time) error {
				start := ts.UnixMilli() + 1 - etWindow
				n, ok, err := windows.Get(start)
				if err != nil || !ok {
					return fmt.Errorf("timer %v of key %d: window %d: %v %v", ts, ctx.Key(), start, ok, err)
				}
				wm := ctx.Watermark()
				if wm.Before(ts) {
					return fmt.Errorf("timer %v fired at watermark %v", ts, wm)
				}
				if wm.Before(time.UnixMilli(etBase + 100*etWindow*etWindow)) {
					early.Add(1) // fired by a watermark, not by the end of the input
				}
				if err := windows.Delete(start); err != nil {
					return err
				}
				return ctx.Emit(windowCount{Key: ctx.Key(), Start: start, Count: n, Emitted: ctx.Timestamp().UnixMilli()})
			},
		}, nil
	})
	stream.Sink(counts, "out", sink)
	plan, err := job.Build()
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

// checkWindows compares the committed window counts with the reference
// computed from the input.
func checkWindows(t *testing.T, out []windowCount, records int64, parts int) int {
	t.Helper()
	type kw struct {
		key   uint64
		start int64
	}
	want := map[kw]int64{}
	for p := range parts {
		for i := range records {
			e := etEvent(p, i)
			want[kw{e.Key, e.TS - e.TS%etWindow}]++
		}
	}
	got := map[kw]int64{}
	dups := 0
	for _, w := range out {
		k := kw{w.Key, w.Start}
		if _, ok := got[k]; ok {
			dups++
		}
		got[k] = w.Count
		if w.Emitted != w.Start+etWindow-1 {
			t.Errorf("window %v emitted with event time %d, want the timer's %d", k, w.Emitted, w.Start+etWindow-1)
		}
	}
	wrong, missing := 0, 0
	for k, n := range want {
		switch m, ok := got[k]; {
		case !ok:
			missing++
		case m != n:
			wrong++
			if wrong < 5 {
				t.Errorf("window %v: count %d, want %d", k, m, n)
			}
		}
	}
	t.Logf("windows: want %d, got %d outputs, duplicates %d, missing %d, wrong %d", len(want), len(out), dups, missing, wrong)
	if dups+missing+wrong > 0 || len(got) != len(want) {
		t.Fatalf("window counts are not exactly the reference")
	}
	return len(want)
}

// TestEventTimeWindows: timers fire when the watermark passes them, in
// order, with the right counts; the end of the input fires the last ones.
func TestEventTimeWindows(t *testing.T) {
	for _, backend := range []string{"memory", "pebble"} {
		t.Run(backend, func(t *testing.T) {
			const records, parts = 20000, 2
			var late, early atomic.Int64
			store := newTxnStore[windowCount]()
			plan := windowJob(t, records, nil, &late, &early, store.sink())
			cfg := engine.Config{
				Tasks:      []int{0, 1},
				Storage:    checkpoint.NewMemory(checkpoint.MemoryOptions{}),
				Checkpoint: checkpoint.Config{Interval: 5 * time.Millisecond},
				StateDir:   t.TempDir(),
			}
			if backend == "pebble" {
				cfg.StateBackend = state.NewPebble(state.PebbleOptions{MemTableSize: 1 << 20, CacheSize: 1 << 20})
			}
			if err := engine.Run(t.Context(), plan, cfg); err != nil {
				t.Fatal(err)
			}
			if late.Load() != 0 {
				t.Errorf("%d records late, want none (out-of-orderness within the bound)", late.Load())
			}
			n := checkWindows(t, store.visible(), records, parts)
			// The last windows of each key fire at the end of the input;
			// all others must have fired as the watermark passed them.
			if open := int64(parts * etKeys * 2); early.Load() < int64(n)-open {
				t.Errorf("%d of %d windows fired before the end of the input, want at least %d", early.Load(), n, int64(n)-open)
			}
		})
	}
}

// TestEventTimeWindowsAcrossRestores fails the job at random records: every
// restore must bring back the windows' state, the event-time timers and
// the watermark, so that each window fires once, with its full count.
func TestEventTimeWindowsAcrossRestores(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	const records, parts, failures = 24000 / raceScale, 2, 10
	in := newInjector(uint64(seed), failures, records*parts)
	var late, early atomic.Int64
	store := newTxnStore[windowCount]()
	plan := windowJob(t, records, in.fail, &late, &early, store.sink())
	in.run(t, plan, 5*time.Millisecond, true)
	if late.Load() != 0 {
		t.Errorf("%d records late after restores, want none", late.Load())
	}
	checkWindows(t, store.visible(), records, parts)
}
