package engine_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/stream"
)

// jEvent is a record of one side of a join.
type jEvent struct {
	Key uint64
	TS  int64
	ID  int64
}

// jPair is a joined pair.
type jPair struct {
	Key    uint64
	A, B   int64 // the IDs
	Start  int64 // window joins: the window
	Stamp  int64 // the pair's event time, as the next operator sees it
	TA, TB int64
}

const (
	jBase  = int64(1_900_000_000_000)
	jBound = 150 // ms
	jKeys  = 5
	jParts = 2
)

// jGen is side s's record i of task p: one record every 3 ms (side a) or
// 4 ms (side b), out of order by up to jBound, never late.
func jGen(seed uint64, side int) func(p int, i int64) jEvent {
	step := int64(3 + side)
	return func(p int, i int64) jEvent {
		rng := rand.New(rand.NewPCG(seed^uint64(i), uint64(p*2+side)))
		return jEvent{Key: uint64(rng.IntN(jKeys))*jParts + uint64(p), TS: jBase + i*step - rng.Int64N(jBound+1), ID: int64(side)<<40 | int64(p)<<32 | i}
	}
}

func joinJob(t *testing.T, seed uint64, records int64, fail func() error,
	join func(a, b stream.KeyedStream[uint64, jEvent]) stream.Stream[jPair], sink engine.SinkOpener[jPair]) *engine.Plan {
	job := stream.NewJob("joins")
	wm := stream.Watermarks[jEvent]{
		OutOfOrderness: jBound * time.Millisecond,
		Timestamp:      func(e jEvent, _ stream.Position) time.Time { return time.UnixMilli(e.TS) },
	}
	keyed := func(name string, side int) stream.KeyedStream[uint64, jEvent] {
		src := stream.SourceWithWatermarks(job, name, stream.GeneratorSource(records, jGen(seed, side)), wm)
		checked := failing(src, name+"-maybe-fail", fail)
		return stream.KeyByPartitioned(checked, name+"-by-key", func(e jEvent) uint64 { return e.Key }, state.Uint64())
	}
	pairs := join(keyed("a", 0), keyed("b", 1))
	byKey := stream.KeyByPartitioned(pairs, "by-pair-key", func(p jPair) uint64 { return p.Key }, state.Uint64())
	stamped := stream.Process(byKey, "stamp", func(*stream.Setup) (stream.Processor[uint64, jPair, jPair], error) {
		return stream.Processor[uint64, jPair, jPair]{Process: func(ctx *stream.Context[uint64, jPair], p jPair) error {
			p.Stamp = ctx.Timestamp().UnixMilli()
			return ctx.Emit(p)
		}}, nil
	})
	stream.Sink(stamped, "sink", sink)
	plan, err := job.Build()
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

type pairKey struct{ a, b, start int64 }

func checkPairs(t *testing.T, got []jPair, want map[pairKey]int64) {
	t.Helper()
	seen := map[pairKey]int{}
	for _, p := range got {
		k := pairKey{p.A, p.B, p.Start}
		seen[k]++
		stamp, ok := want[k]
		if !ok {
			t.Fatalf("pair %+v is not in the reference", p)
		}
		if p.Stamp != stamp {
			t.Fatalf("pair %+v carries event time %d, want %d", p, p.Stamp, stamp)
		}
	}
	missing, dups := 0, 0
	for k := range want {
		switch seen[k] {
		case 0:
			missing++
		case 1:
		default:
			dups += seen[k] - 1
		}
	}
	t.Logf("pairs: want %d, got %d, missing %d, duplicates %d", len(want), len(got), missing, dups)
	if missing+dups > 0 {
		t.FailNow()
	}
}

func sides(seed uint64, records int64) (as, bs []jEvent) {
	for p := range jParts {
		for i := range records {
			as = append(as, jGen(seed, 0)(p, i))
			bs = append(bs, jGen(seed, 1)(p, i))
		}
	}
	return as, bs
}

func joinCases(seed uint64, records int64) []struct {
	name string
	join func(a, b stream.KeyedStream[uint64, jEvent]) stream.Stream[jPair]
	want map[pairKey]int64
} {
	as, bs := sides(seed, records)
	const lo, hi = -40, 25 // ms
	interval := map[pairKey]int64{}
	window := map[pairKey]int64{}
	for _, a := range as {
		for _, b := range bs {
			if a.Key != b.Key {
				continue
			}
			if b.TS >= a.TS+lo && b.TS <= a.TS+hi {
				interval[pairKey{a.ID, b.ID, 0}] = max(a.TS, b.TS)
			}
			for _, w := range windowsOf(a.TS, 200, 100) {
				if b.TS >= w[0] && b.TS < w[1] {
					window[pairKey{a.ID, b.ID, w[0]}] = w[1] - 1
				}
			}
		}
	}
	return []struct {
		name string
		join func(a, b stream.KeyedStream[uint64, jEvent]) stream.Stream[jPair]
		want map[pairKey]int64
	}{
		{"interval", func(a, b stream.KeyedStream[uint64, jEvent]) stream.Stream[jPair] {
			return stream.IntervalJoin(a, b, "join", lo*time.Millisecond, hi*time.Millisecond, state.JSON[jEvent](), state.JSON[jEvent](),
				func(k uint64, x, y jEvent) (jPair, error) {
					return jPair{Key: k, A: x.ID, B: y.ID, TA: x.TS, TB: y.TS}, nil
				})
		}, interval},
		{"window", func(a, b stream.KeyedStream[uint64, jEvent]) stream.Stream[jPair] {
			return stream.WindowJoin(a, b, "join", stream.Sliding(200*time.Millisecond, 100*time.Millisecond), state.JSON[jEvent](), state.JSON[jEvent](),
				func(k uint64, w stream.Window, x, y jEvent) (jPair, error) {
					return jPair{Key: k, A: x.ID, B: y.ID, Start: w.Start.UnixMilli(), TA: x.TS, TB: y.TS}, nil
				})
		}, window},
	}
}

// TestJoins checks interval and window joins against a reference computed
// offline from random out-of-order input, without and with failures.
func TestJoins(t *testing.T) {
	const records = 1500 / raceScale
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for _, tc := range joinCases(seed, records) {
		for _, failures := range []int{0, 10} {
			t.Run(fmt.Sprintf("%s/failures-%d", tc.name, failures), func(t *testing.T) {
				in := newInjector(seed, failures, 2*records*jParts)
				store := newTxnStore[jPair]()
				plan := joinJob(t, seed, records, in.fail, tc.join, store.sink())
				in.run(t, plan, 10*time.Millisecond, true)
				checkPairs(t, store.visible(), tc.want)
			})
		}
	}
}

// gatedOneByOne is oneByOne that emits no record from gate on until a
// checkpoint barrier went out after the records before it: a join aligns
// that barrier on both its inputs, so it has taken both inputs'
// watermarks of before the gate when it meets the records after it.
type gatedOneByOne struct {
	oneByOne
	gate int64
	seen atomic.Int64 // the highest position a barrier took
}

func (o *gatedOneByOne) Poll(ctx context.Context, b *engine.Batch[wEvent]) error {
	if o.next >= o.gate && o.seen.Load() < o.gate {
		return nil // until the barrier
	}
	return o.oneByOne.Poll(ctx, b)
}

func (o *gatedOneByOne) Positions() []checkpoint.SourcePosition {
	p := o.oneByOne.Positions()
	if p[0].Offset > o.seen.Load() {
		o.seen.Store(p[0].Offset)
	}
	return p
}

// TestJoinLateRecordsCounted: a join drops the records that come behind
// its watermark, and each is counted (weir_late_records_dropped_total)
// and logged. Both sides come from one source, gated so that the late
// records meet the watermark of the records before them on both inputs.
func TestJoinLateRecordsCounted(t *testing.T) {
	for _, tc := range []struct {
		name string
		join func(a, b stream.KeyedStream[uint64, wEvent]) stream.Stream[string]
	}{
		{"interval", func(a, b stream.KeyedStream[uint64, wEvent]) stream.Stream[string] {
			return stream.IntervalJoin(a, b, "join", -50*time.Millisecond, 50*time.Millisecond, state.JSON[wEvent](), state.JSON[wEvent](),
				func(_ uint64, x, y wEvent) (string, error) { return fmt.Sprint(x.TS-wBase, y.TS-wBase), nil })
		}},
		{"window", func(a, b stream.KeyedStream[uint64, wEvent]) stream.Stream[string] {
			return stream.WindowJoin(a, b, "join", stream.Tumbling(100*time.Millisecond), state.JSON[wEvent](), state.JSON[wEvent](),
				func(_ uint64, _ stream.Window, x, y wEvent) (string, error) {
					return fmt.Sprint(x.TS-wBase, y.TS-wBase), nil
				})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			side := func(s int64) func(wEvent) (bool, error) {
				return func(e wEvent) (bool, error) { return e.ID == s, nil }
			}
			// b@1000 moves the watermark past a@10 and b@20, which are late.
			recs := []wEvent{{Key: 1, TS: wBase, ID: 0}, {Key: 1, TS: wBase + 1000, ID: 1}, {Key: 1, TS: wBase + 10, ID: 0},
				{Key: 1, TS: wBase + 20, ID: 1}, {Key: 1, TS: wBase + 1010, ID: 0}}
			job := stream.NewJob("late-join")
			src := stream.SourceWithWatermarks(job, "events", func(context.Context, engine.TaskInfo, []checkpoint.SourcePosition) (engine.SourceReader[wEvent], error) {
				return &gatedOneByOne{oneByOne: oneByOne{recs: recs}, gate: 2}, nil
			}, stream.Watermarks[wEvent]{Timestamp: func(e wEvent, _ stream.Position) time.Time { return time.UnixMilli(e.TS) }})
			key := func(e wEvent) uint64 { return e.Key }
			a := stream.KeyByPartitioned(stream.Filter(src, "a", side(0)), "by-a", key, state.Uint64())
			b := stream.KeyByPartitioned(stream.Filter(src, "b", side(1)), "by-b", key, state.Uint64())
			out := newTxnStore[string]()
			stream.Sink(tc.join(a, b), "sink", out.sink())
			plan, err := job.Build()
			if err != nil {
				t.Fatal(err)
			}
			obs, log := &lateObserver{}, &logBuffer{}
			if err := engine.Run(t.Context(), plan, engine.Config{Tasks: []int{0}, Storage: checkpoint.NewMemory(checkpoint.MemoryOptions{}), StateDir: t.TempDir(),
				Checkpoint: checkpoint.Config{Interval: 5 * time.Millisecond}, MaxRestarts: 1, RestartBackoff: time.Millisecond, Observer: obs, Logger: slog.New(slog.NewTextHandler(log, nil))}); err != nil {
				t.Fatal(err)
			}
			if got := out.visible(); !slices.Equal(got, []string{"1010 1000"}) {
				t.Errorf("joined %q, want only 1010 with 1000", got)
			}
			if n := obs.count("join"); n != 2 {
				t.Errorf("the observer heard of %d late records dropped, want 2", n)
			}
			if !strings.Contains(log.String(), "dropped records behind the watermark") || !strings.Contains(log.String(), "operator=join") {
				t.Errorf("no log line names the join's late records:\n%s", log)
			}
		})
	}
}
