package engine_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/stream"
)

// oneByOne is a bounded source that polls one record at a time, so that a
// watermark follows each record; endless, it has no more for ever after
// them instead of ending.
type oneByOne struct {
	recs    []wEvent
	next    int64
	endless bool
}

func (o *oneByOne) Poll(_ context.Context, b *engine.Batch[wEvent]) error {
	if o.next >= int64(len(o.recs)) {
		if o.endless {
			return nil
		}
		return engine.ErrEndOfInput
	}
	b.Add(o.recs[o.next], engine.Position{Source: "events", Offset: o.next})
	o.next++
	return nil
}

func (o *oneByOne) Positions() []checkpoint.SourcePosition {
	return []checkpoint.SourcePosition{{Source: "events", Offset: o.next}}
}

func (o *oneByOne) Close() error { return nil }

// runEdge counts recs in windows of w, no out-of-orderness, and returns the
// firings (start and end relative to wBase) and the late records.
func runEdge(t *testing.T, recs []wEvent, w stream.WindowAssigner, lateness time.Duration) ([][3]int64, int) {
	t.Helper()
	r := runLateness(t, recs, w, lateness, true)
	return r.fired, r.late
}

// windowsRun is what runLateness saw.
type windowsRun struct {
	fired   [][3]int64 // start and end relative to wBase, count
	late    int        // records in the late stream
	dropped int64      // late records the observer heard dropped
	log     string
}

// runLateness is runEdge with the late stream used or not (useLate).
func runLateness(t *testing.T, recs []wEvent, w stream.WindowAssigner, lateness time.Duration, useLate bool) windowsRun {
	t.Helper()
	job := stream.NewJob("edges")
	src := stream.SourceWithWatermarks(job, "events", func(context.Context, engine.TaskInfo, []checkpoint.SourcePosition) (engine.SourceReader[wEvent], error) {
		return &oneByOne{recs: recs}, nil
	}, stream.Watermarks[wEvent]{Timestamp: func(e wEvent, _ stream.Position) time.Time { return time.UnixMilli(e.TS) }})
	win := stream.Aggregate(stream.KeyByPartitioned(src, "by-key", func(e wEvent) uint64 { return e.Key }, state.Uint64()), "windows",
		w, stream.WindowOptions{AllowedLateness: lateness}, state.Int64(), countAdd, countMerge, countResult)
	res, late := newTxnStore[wResult](), newTxnStore[wEvent]()
	stream.Sink(win.Results, "sink", res.sink())
	if useLate {
		stream.Sink(win.Late, "late", late.sink())
	}
	plan, err := job.Build()
	if err != nil {
		t.Fatal(err)
	}
	obs, log := &lateObserver{}, &logBuffer{}
	err = engine.Run(t.Context(), plan, engine.Config{Tasks: []int{0}, Storage: checkpoint.NewMemory(checkpoint.MemoryOptions{}), StateDir: t.TempDir(),
		MaxRestarts: 1, RestartBackoff: time.Millisecond, Observer: obs, Logger: slog.New(slog.NewTextHandler(log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	r := windowsRun{late: len(late.visible()), dropped: obs.count("windows"), log: log.String()}
	for _, x := range res.visible() {
		r.fired = append(r.fired, [3]int64{x.Start - wBase, x.End - wBase, x.Count})
	}
	return r
}

// lateObserver counts the late records each operator dropped.
type lateObserver struct {
	engine.NopObserver
	mu      sync.Mutex
	dropped map[string]*atomic.Int64
}

func (o *lateObserver) LateDropped(_ string, _ int, operator string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.dropped == nil {
		o.dropped = map[string]*atomic.Int64{}
	}
	if o.dropped[operator] == nil {
		o.dropped[operator] = &atomic.Int64{}
	}
	o.dropped[operator].Add(1)
}

func (o *lateObserver) count(operator string) int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	if c := o.dropped[operator]; c != nil {
		return c.Load()
	}
	return 0
}

// TestLateRecordsDroppedAreCounted: a window whose late stream nothing
// takes drops its late records, and says so: each one to the observer
// (weir_late_records_dropped_total) and the first in a log line naming the
// operator and the record. With the late stream used, none is dropped.
func TestLateRecordsDroppedAreCounted(t *testing.T) {
	for _, tc := range []struct {
		name string
		w    stream.WindowAssigner
	}{{"tumbling", stream.Tumbling(100 * time.Millisecond)}, {"sliding", stream.Sliding(100*time.Millisecond, 50*time.Millisecond)},
		{"session", stream.Session(10 * time.Millisecond)}} {
		t.Run(tc.name, func(t *testing.T) {
			// 1000 moves the watermark past the windows of 0 and 10:
			// 10 and 20 are late, 1010 is not.
			recs := []wEvent{at(0), at(1000), at(10), at(20), at(1010)}
			used := runLateness(t, recs, tc.w, 0, true)
			if used.late != 2 || used.dropped != 0 {
				t.Fatalf("late stream used: %d late records, %d dropped; want 2 and 0", used.late, used.dropped)
			}
			r := runLateness(t, recs, tc.w, 0, false)
			if r.dropped != 2 {
				t.Fatalf("late stream unused: the observer heard of %d dropped records, want 2 (log: %s)", r.dropped, r.log)
			}
			if !slices.Equal(r.fired, used.fired) {
				t.Fatalf("late stream unused: fired %v, want %v as with it used", r.fired, used.fired)
			}
			if n := strings.Count(r.log, "dropped records behind the watermark"); n != 1 || !strings.Contains(r.log, "operator=windows") ||
				!strings.Contains(r.log, "events 0@2") {
				t.Fatalf("want one log line naming the operator and the first late record (events 0@2), got %d in:\n%s", n, r.log)
			}
		})
	}
}

func at(ms int64) wEvent { return wEvent{Key: 1, TS: wBase + ms, ID: 1 << 32} }

// TestSessionsExactlyGapApart: records exactly gap apart are one session,
// as in Flink (whose windows merge when they touch) and Kafka Streams; a
// record a millisecond further is another.
func TestSessionsExactlyGapApart(t *testing.T) {
	fired, late := runEdge(t, []wEvent{at(0), at(10), at(21), at(100)}, stream.Session(10*time.Millisecond), 0)
	want := [][3]int64{{0, 20, 2}, {21, 31, 1}, {100, 110, 1}}
	if !slices.Equal(fired, want) || late != 0 {
		t.Fatalf("fired %v, %d late; want %v, none late", fired, late, want)
	}
}

// TestSessionTimerSharedWithAnother: session [20,30)'s firing timer (29) is
// also session [0,10)'s cleanup timer (9+20); extending [0,10) (fired
// already, within its lateness: it fires again, merged) must not take the
// timer away from [20,30).
func TestSessionTimerSharedWithAnother(t *testing.T) {
	fired, late := runEdge(t, []wEvent{at(0), at(20), at(8), at(100)}, stream.Session(10*time.Millisecond), 20*time.Millisecond)
	want := [][3]int64{{0, 10, 1}, {0, 18, 2}, {20, 30, 1}, {100, 110, 1}}
	if !slices.Equal(fired, want) || late != 0 {
		t.Fatalf("fired %v, %d late; want %v, none late", fired, late, want)
	}
}

// TestSessionLatenessOfTheMergedSession: a record whose own [ts, ts+gap) is
// behind the watermark but that falls in an open session joins it.
func TestSessionLatenessOfTheMergedSession(t *testing.T) {
	fired, late := runEdge(t, []wEvent{at(0), at(90), at(150), at(20)}, stream.Session(100*time.Millisecond), 0)
	want := [][3]int64{{0, 250, 4}}
	if !slices.Equal(fired, want) || late != 0 {
		t.Fatalf("fired %v, %d late; want %v, none late", fired, late, want)
	}
}

// TestEventTimeBefore1970: timestamps before the epoch (Kafka's -1 among
// them) have windows and timers like any other.
func TestEventTimeBefore1970(t *testing.T) {
	recs := []wEvent{{Key: 1, TS: wBase - 5}, {Key: 1, TS: wBase + 3}}
	for i := range recs {
		recs[i].TS -= wBase // -5 and 3 ms after 1970
	}
	fired, late := runEdge(t, recs, stream.Tumbling(10*time.Millisecond), 0)
	want := [][3]int64{{-10 - wBase, -wBase, 1}, {-wBase, 10 - wBase, 1}}
	if !slices.Equal(fired, want) || late != 0 {
		t.Fatalf("fired %v, %d late; want %v", fired, late, want)
	}
}

// TestWindowEventTimePastTimers: an event time past what event-time timers
// hold (about 2227; here a microsecond timestamp taken for milliseconds,
// the year 55840) fails the task, naming it. Its timer's time wrapped
// around before, and its window never fired, nor did anything say so.
func TestWindowEventTimePastTimers(t *testing.T) {
	recs := []wEvent{{Key: 1, TS: 1_700_000_000_000}, {Key: 2, TS: 1_700_000_000_000_000}}
	job := stream.NewJob("far")
	src := stream.SourceWithWatermarks(job, "events", func(context.Context, engine.TaskInfo, []checkpoint.SourcePosition) (engine.SourceReader[wEvent], error) {
		return &oneByOne{recs: recs}, nil
	}, stream.Watermarks[wEvent]{Timestamp: func(e wEvent, _ stream.Position) time.Time { return time.UnixMilli(e.TS) }})
	keyed := stream.KeyByPartitioned(src, "by-key", func(e wEvent) uint64 { return e.Key }, state.Uint64())
	win := stream.Aggregate(keyed, "windows", stream.Tumbling(10*time.Millisecond), stream.WindowOptions{}, state.Int64(), countAdd, countMerge, countResult)
	stream.Sink(win.Results, "sink", stream.DiscardSink[wResult]())
	plan, err := job.Build()
	if err != nil {
		t.Fatal(err)
	}
	err = engine.Run(t.Context(), plan, engine.Config{Tasks: []int{0}, Storage: checkpoint.NewMemory(checkpoint.MemoryOptions{}),
		StateDir: t.TempDir(), RestartBackoff: time.Millisecond})
	var re *engine.RecordError
	if !errors.As(err, &re) || re.Position.Offset != 1 || !strings.Contains(err.Error(), "the latest an event-time timer holds") {
		t.Fatalf("run: %v; want the task failed on record 1, its event time past the timers'", err)
	}
}
