package engine_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/stream"
)

// oneByOne is a bounded source that polls one record at a time, so that a
// watermark follows each record.
type oneByOne struct {
	recs []wEvent
	next int64
}

func (o *oneByOne) Poll(_ context.Context, b *engine.Batch[wEvent]) error {
	if o.next >= int64(len(o.recs)) {
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
	job := stream.NewJob("edges")
	src := stream.SourceWithWatermarks(job, "events", func(context.Context, engine.TaskInfo, []checkpoint.SourcePosition) (engine.SourceReader[wEvent], error) {
		return &oneByOne{recs: recs}, nil
	}, stream.Watermarks[wEvent]{Timestamp: func(e wEvent, _ stream.Position) time.Time { return time.UnixMilli(e.TS) }})
	win := stream.Aggregate(stream.KeyByPartitioned(src, "by-key", func(e wEvent) uint64 { return e.Key }, state.Uint64()), "windows",
		w, stream.WindowOptions{AllowedLateness: lateness}, state.Int64(), countAdd, countMerge, countResult)
	res, late := newTxnStore[wResult](), newTxnStore[wEvent]()
	stream.Sink(win.Results, "sink", res.sink())
	stream.Sink(win.Late, "late", late.sink())
	plan, err := job.Build()
	if err != nil {
		t.Fatal(err)
	}
	err = engine.Run(t.Context(), plan, engine.Config{Tasks: []int{0}, Storage: checkpoint.NewMemory(checkpoint.MemoryOptions{}), StateDir: t.TempDir(), MaxRestarts: 1, RestartBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var fired [][3]int64
	for _, r := range res.visible() {
		fired = append(fired, [3]int64{r.Start - wBase, r.End - wBase, r.Count})
	}
	return fired, len(late.visible())
}

func at(ms int64) wEvent { return wEvent{Key: 1, TS: wBase + ms, ID: 1 << 32} }

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
