package engine_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/stream"
)

// The window tests' input is random and out of order, but built so that
// which records are late does not depend on where polls and restores cut
// the input, and the output can be computed offline exactly:
//
//   - on time: up to wBound behind the record's place on the time line
//     (record i is i ms after wBase, plus a pause of a second after every
//     500 records, which ends the sessions); never late;
//   - late within the lateness (only where the test allows lateness): 8 to
//     11 s behind: every window they belong to has fired (the watermark
//     trails the time line by at most a poll of 1024 records, 4.1 s with
//     its pauses, plus twice the bound), and none is past its 15 s
//     lateness; each one fires its windows again with the updated result;
//   - too late: 30 to 40 s behind, past every window's lateness: they go
//     to the late output.
//
// The first two polls are all on time: before them there is no watermark.
const (
	wBase     = int64(1_800_000_000_000)
	wBound    = 200 // ms
	wLateness = 15 * time.Second
	wKeys     = 7
	wParts    = 2
	wSafe     = 2048 // records before the first late one
)

type wClass int

const (
	onTime wClass = iota
	lateOK
	tooLate
)

type wEvent struct {
	Key uint64
	TS  int64
	// ID is task*records + i in the low 32 bits, and a count of 1 in
	// the high ones, which the reduce case sums.
	ID    int64
	Class wClass
}

func wEventOf(seed uint64, records int64, withLateness bool) func(p int, i int64) wEvent {
	return func(p int, i int64) wEvent {
		rng := rand.New(rand.NewPCG(seed^uint64(i), uint64(p)))
		e := wEvent{Key: uint64(i%wKeys)*wParts + uint64(p), ID: 1<<32 | (int64(p)*records + i)}
		t := wBase + i + 1000*(i/500)
		switch r := rng.IntN(100); {
		case i < wSafe || r < 92 || r < 96 && !withLateness:
			e.TS = t - rng.Int64N(wBound+1)
		case r < 96:
			e.TS, e.Class = t-8000-rng.Int64N(3001), lateOK
		default:
			e.TS, e.Class = t-30000-rng.Int64N(10001), tooLate
		}
		return e
	}
}

// wResult is one firing of a window.
type wResult struct {
	Key        uint64
	Start, End int64
	Count      int64
	Emitted    int64 // the output's event time
}

type wOut struct {
	Result *wResult
	Late   *wEvent
}

// windowsJob windows the events by key with build and sends both the
// results and the late records to one sink.
func windowsJob(t *testing.T, records int64, gen func(int, int64) wEvent, fail func() error,
	build func(stream.KeyedStream[uint64, wEvent]) stream.Windowed[wResult, wEvent], sink engine.SinkOpener[wOut]) *engine.Plan {
	job := stream.NewJob("windows")
	src := stream.SourceWithWatermarks(job, "events", stream.GeneratorSource(records, gen), stream.Watermarks[wEvent]{
		OutOfOrderness: wBound * time.Millisecond,
		Timestamp:      func(e wEvent, _ stream.Position) time.Time { return time.UnixMilli(e.TS) },
	})
	checked := failing(src, "maybe-fail", fail)
	w := build(stream.KeyByPartitioned(checked, "by-key", func(e wEvent) uint64 { return e.Key }, state.Uint64()))
	// A keyed operator downstream sees the event time each result carries.
	byWindow := stream.KeyByPartitioned(w.Results, "by-window", func(r wResult) uint64 { return r.Key }, state.Uint64())
	results := stream.Process(byWindow, "results", func(*stream.Setup) (stream.Processor[uint64, wResult, wOut], error) {
		return stream.Processor[uint64, wResult, wOut]{Process: func(ctx *stream.Context[uint64, wOut], r wResult) error {
			r.Emitted = ctx.Timestamp().UnixMilli()
			return ctx.Emit(wOut{Result: &r})
		}}, nil
	})
	late := stream.Map(w.Late, "late", func(e wEvent) (wOut, error) { return wOut{Late: &e}, nil })
	stream.Sink(stream.Union("out", results, late), "sink", sink)
	plan, err := job.Build()
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

type wKey struct {
	key        uint64
	start, end int64
}

// windowsOf lists the windows [start, end) of ts for tumbling (slide ==
// size) and sliding windows.
func windowsOf(ts, size, slide int64) [][2]int64 {
	var ws [][2]int64
	last := ts - ((ts%slide)+slide)%slide
	for s := last; s > ts-size; s -= slide {
		ws = append(ws, [2]int64{s, s + size})
	}
	return ws
}

// expectFirings is, per window, the counts it must emit in order: the on
// time count when the watermark passes it, then one more for each record
// late within the lateness.
func expectFirings(events []wEvent, size, slide int64) map[wKey][]int64 {
	on, late := map[wKey]int64{}, map[wKey]int64{}
	for _, e := range events {
		for _, w := range windowsOf(e.TS, size, slide) {
			k := wKey{e.Key, w[0], w[1]}
			switch e.Class {
			case onTime:
				on[k]++
			case lateOK:
				late[k]++
			}
		}
	}
	want := map[wKey][]int64{}
	for k, n := range on {
		want[k] = []int64{n}
	}
	for k, n := range late {
		for j := int64(1); j <= n; j++ {
			want[k] = append(want[k], on[k]+j)
		}
	}
	return want
}

// expectSessions is, per session of on-time records, its count: records
// at most gap apart are one session.
func expectSessions(events []wEvent, gap int64) map[wKey][]int64 {
	byKey := map[uint64][]int64{}
	for _, e := range events {
		if e.Class == onTime {
			byKey[e.Key] = append(byKey[e.Key], e.TS)
		}
	}
	want := map[wKey][]int64{}
	for k, ts := range byKey {
		slices.Sort(ts)
		start, end, n := ts[0], ts[0]+gap, int64(1)
		for _, x := range ts[1:] {
			if x <= end {
				end, n = max(end, x+gap), n+1
				continue
			}
			want[wKey{k, start, end}] = []int64{n}
			start, end, n = x, x+gap, 1
		}
		want[wKey{k, start, end}] = []int64{n}
	}
	return want
}

func checkFirings(t *testing.T, out []wOut, events []wEvent, want map[wKey][]int64) {
	t.Helper()
	got := map[wKey][]int64{}
	lateSeen := map[int64]int{}
	for _, o := range out {
		if o.Late != nil {
			lateSeen[o.Late.ID]++
			continue
		}
		r := o.Result
		k := wKey{r.Key, r.Start, r.End}
		got[k] = append(got[k], r.Count)
		if r.Emitted != r.End-1 {
			t.Fatalf("window %v emitted at event time %d, want its end-1 %d", k, r.Emitted, r.End-1)
		}
	}
	bad := 0
	for k, w := range want {
		if !slices.Equal(got[k], w) {
			if bad++; bad <= 5 {
				t.Errorf("window %v (%v): emitted %v, want %v", k, time.Duration(k.end-k.start)*time.Millisecond, got[k], w)
			}
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			if bad++; bad <= 5 {
				t.Errorf("window %v emitted %v, want nothing", k, g)
			}
		}
	}
	nLate := 0
	for _, e := range events {
		n := lateSeen[e.ID]
		switch {
		case e.Class == tooLate:
			nLate++
			if n != 1 {
				t.Fatalf("too late record %+v: in the late output %d times, want once", e, n)
			}
		case n != 0:
			t.Fatalf("%v record %+v is in the late output", e.Class, e)
		}
	}
	t.Logf("windows %d, results %d, late records %d; %d windows wrong", len(want), len(out)-nLate, nLate, bad)
	if bad > 0 {
		t.FailNow()
	}
}

func countAdd(n int64, _ wEvent) int64 { return n + 1 }
func countMerge(a, b int64) int64      { return a + b }
func countResult(k uint64, w stream.Window, n int64) (wResult, error) {
	return wResult{Key: k, Start: w.Start.UnixMilli(), End: w.End.UnixMilli(), Count: n}, nil
}

func windowCases() []struct {
	name     string
	lateness bool
	build    func(stream.KeyedStream[uint64, wEvent]) stream.Windowed[wResult, wEvent]
	want     func([]wEvent) map[wKey][]int64
} {
	lateness := stream.WindowOptions{AllowedLateness: wLateness}
	return []struct {
		name     string
		lateness bool
		build    func(stream.KeyedStream[uint64, wEvent]) stream.Windowed[wResult, wEvent]
		want     func([]wEvent) map[wKey][]int64
	}{
		{"tumbling-aggregate", true, func(k stream.KeyedStream[uint64, wEvent]) stream.Windowed[wResult, wEvent] {
			return stream.Aggregate(k, "tumbling", stream.Tumbling(time.Second), lateness, state.Int64(), countAdd, countMerge, countResult)
		}, func(es []wEvent) map[wKey][]int64 { return expectFirings(es, 1000, 1000) }},
		{"sliding-apply", true, func(k stream.KeyedStream[uint64, wEvent]) stream.Windowed[wResult, wEvent] {
			return stream.Apply(k, "sliding", stream.Sliding(2*time.Second, 500*time.Millisecond), lateness, state.JSON[wEvent](),
				func(key uint64, w stream.Window, items []wEvent, out *stream.Emitter[wResult]) error {
					for _, e := range items {
						if e.TS < w.Start.UnixMilli() || e.TS >= w.End.UnixMilli() || e.Key != key {
							return fmt.Errorf("record %+v in window %v of key %d", e, w, key)
						}
					}
					return out.Emit(wResult{Key: key, Start: w.Start.UnixMilli(), End: w.End.UnixMilli(), Count: int64(len(items))})
				})
		}, func(es []wEvent) map[wKey][]int64 { return expectFirings(es, 2000, 500) }},
		{"tumbling-reduce", false, func(k stream.KeyedStream[uint64, wEvent]) stream.Windowed[wResult, wEvent] {
			// Reduce keeps the earliest record; the count rides in ID.
			return stream.Reduce(k, "reduce", stream.Tumbling(700*time.Millisecond), stream.WindowOptions{}, state.JSON[wEvent](),
				func(a, b wEvent) wEvent {
					n := a.ID>>32 + b.ID>>32
					if b.TS < a.TS {
						a = b
					}
					a.ID = n << 32
					return a
				},
				func(key uint64, w stream.Window, v wEvent) (wResult, error) {
					return wResult{Key: key, Start: w.Start.UnixMilli(), End: w.End.UnixMilli(), Count: v.ID >> 32}, nil
				})
		}, func(es []wEvent) map[wKey][]int64 { return expectFirings(es, 700, 700) }},
		{"session-aggregate", false, func(k stream.KeyedStream[uint64, wEvent]) stream.Windowed[wResult, wEvent] {
			return stream.Aggregate(k, "sessions", stream.Session(300*time.Millisecond), stream.WindowOptions{}, state.Int64(), countAdd, countMerge, countResult)
		}, func(es []wEvent) map[wKey][]int64 { return expectSessions(es, 300) }},
	}
}

func TestWindows(t *testing.T) {
	const records = 12000 / raceScale
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for _, tc := range windowCases() {
		for _, backend := range []string{"memory", "pebble"} {
			t.Run(tc.name+"/"+backend, func(t *testing.T) {
				runWindows(t, seed, records, tc.lateness, tc.build, tc.want, backend, 0)
			})
		}
	}
}

// TestWindowsAcrossRestores fails the jobs at random records: windows,
// timers and watermarks must come back from each restore so that the
// output is the reference still.
func TestWindowsAcrossRestores(t *testing.T) {
	const records = 24000 / raceScale
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for _, tc := range windowCases() {
		t.Run(tc.name, func(t *testing.T) {
			runWindows(t, seed, records, tc.lateness, tc.build, tc.want, "pebble", 8)
		})
	}
}

func runWindows(t *testing.T, seed uint64, records int64, lateness bool, build func(stream.KeyedStream[uint64, wEvent]) stream.Windowed[wResult, wEvent],
	want func([]wEvent) map[wKey][]int64, backend string, failures int) {
	gen := wEventOf(seed, records, lateness)
	if build == nil {
		t.Fatal("no job")
	}
	var events []wEvent
	for p := range wParts {
		for i := range records {
			events = append(events, gen(p, i))
		}
	}
	in := newInjector(seed, failures, records*wParts)
	store := newTxnStore[wOut]()
	plan := windowsJob(t, records, gen, in.fail, build, store.sink())
	in.run(t, plan, 10*time.Millisecond, backend == "pebble")
	checkFirings(t, store.visible(), events, want(events))
}

// TestSessionMerge: a record that bridges two sessions merges them, with
// their contents, for an aggregate and for a full-window function.
func TestSessionMerge(t *testing.T) {
	at := func(ms int64) wEvent { return wEvent{Key: 1, TS: wBase + ms, ID: 1 << 32} }
	// Sessions [0,500) and [1000,1500); 400 extends the first to [0,900);
	// 800 bridges both: [0,1500), 4 records. 5000 is a session of its own.
	input := [][]wEvent{{at(0), at(1000), at(400), at(800), at(5000)}}
	want := map[wKey][]int64{{1, wBase, wBase + 1500}: {4}, {1, wBase + 5000, wBase + 5500}: {1}}
	for name, build := range map[string]func(stream.KeyedStream[uint64, wEvent]) stream.Windowed[wResult, wEvent]{
		"aggregate": func(k stream.KeyedStream[uint64, wEvent]) stream.Windowed[wResult, wEvent] {
			return stream.Aggregate(k, "sessions", stream.Session(500*time.Millisecond), stream.WindowOptions{}, state.Int64(), countAdd, countMerge, countResult)
		},
		"apply": func(k stream.KeyedStream[uint64, wEvent]) stream.Windowed[wResult, wEvent] {
			return stream.Apply(k, "sessions", stream.Session(500*time.Millisecond), stream.WindowOptions{}, state.JSON[wEvent](),
				func(key uint64, w stream.Window, items []wEvent, out *stream.Emitter[wResult]) error {
					return out.Emit(wResult{Key: key, Start: w.Start.UnixMilli(), End: w.End.UnixMilli(), Count: int64(len(items))})
				})
		},
	} {
		for _, backend := range []string{"memory", "pebble"} {
			t.Run(name+"/"+backend, func(t *testing.T) {
				job := stream.NewJob("sessions")
				// Out-of-orderness of 10 s: nothing fires before the end.
				src := stream.SourceWithWatermarks(job, "events", stream.SliceSource(input), stream.Watermarks[wEvent]{
					OutOfOrderness: 10 * time.Second,
					Timestamp:      func(e wEvent, _ stream.Position) time.Time { return time.UnixMilli(e.TS) },
				})
				w := build(stream.KeyByPartitioned(src, "by-key", func(e wEvent) uint64 { return e.Key }, state.Uint64()))
				store := newTxnStore[wResult]()
				stream.Sink(w.Results, "sink", store.sink())
				plan, err := job.Build()
				if err != nil {
					t.Fatal(err)
				}
				cfg := engine.Config{Tasks: []int{0}, Storage: checkpoint.NewMemory(checkpoint.MemoryOptions{}), StateDir: t.TempDir()}
				if backend == "pebble" {
					cfg.StateBackend = state.NewPebble(state.PebbleOptions{MemTableSize: 1 << 20, CacheSize: 1 << 20})
				}
				if err := engine.Run(t.Context(), plan, cfg); err != nil {
					t.Fatal(err)
				}
				got := map[wKey][]int64{}
				for _, r := range store.visible() {
					k := wKey{r.Key, r.Start, r.End}
					got[k] = append(got[k], r.Count)
				}
				if len(got) != len(want) {
					t.Fatalf("sessions %v, want %v", got, want)
				}
				for k, w := range want {
					if !slices.Equal(got[k], w) {
						t.Fatalf("sessions %v, want %v", got, want)
					}
				}
			})
		}
	}
}
