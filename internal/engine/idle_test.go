package engine_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/stream"
)

// fakeClock is a processing-time clock that moves only when the test moves
// it. Goroutines other than the one moving it read it.
type fakeClock struct {
	start   time.Time
	elapsed atomic.Int64
}

func (c *fakeClock) now() time.Time          { return c.start.Add(time.Duration(c.elapsed.Load())) }
func (c *fakeClock) advance(d time.Duration) { c.elapsed.Add(int64(d)) }

// pollScript is a bounded source of two splits, topics "a" and "b", whose
// records carry their timestamp in the Position. Each Poll takes the next
// step: it waits on the clock, as a reader waits for input, then returns
// the step's records.
type pollScript struct {
	clock *fakeClock
	steps []pollStep
	next  int
	off   [2]int64
}

type pollStep struct {
	wait time.Duration
	recs []wEvent
}

// onSplit is a record of split a (0) or b (1), at ms past wBase; its key
// says its split.
func onSplit(split int, ms int64) wEvent { return wEvent{Key: uint64(split), TS: wBase + ms} }

func (r *pollScript) Poll(_ context.Context, b *engine.Batch[wEvent]) error {
	if r.next >= len(r.steps) {
		return engine.ErrEndOfInput
	}
	step := r.steps[r.next]
	r.next++
	r.clock.advance(step.wait)
	for _, e := range step.recs {
		b.Add(e, engine.Position{Source: "events", Topic: []string{"a", "b"}[e.Key], Offset: r.off[e.Key], Timestamp: e.TS})
		r.off[e.Key]++
	}
	return nil
}

func (r *pollScript) Positions() []checkpoint.SourcePosition {
	return []checkpoint.SourcePosition{{Source: "events", Topic: "a", Offset: r.off[0]}, {Source: "events", Topic: "b", Offset: r.off[1]}}
}

func (r *pollScript) Close() error { return nil }

// TestIdlenessJudgedWhenPollsReturn: a split is judged idle when a poll
// returns, by what that poll could return, on processing time.
//   - busy: the operator spent twice the idleness on a's record at +5000,
//     while b's record at +1500 came in; the next poll hands it over, on
//     time.
//   - waiting: the source waited that long in Poll, and the poll brought
//     a's record only: b is idle, its later record late.
//   - backlog: a's records come at once poll after poll, each taking 300
//     ms to process; b, empty, goes idle after the idleness all the same.
//     Counted on the time spent in Poll only, it never did, and held the
//     watermark back for the whole catch-up.
func TestIdlenessJudgedWhenPollsReturn(t *testing.T) {
	const idleness = time.Second
	late := onSplit(1, 1500)
	backlog := []pollStep{{recs: []wEvent{onSplit(0, 1000), onSplit(1, 1000)}}}
	for i := range int64(6) {
		backlog = append(backlog, pollStep{recs: []wEvent{onSplit(0, 2000+i*1000)}})
	}
	for _, tc := range []struct {
		name  string
		steps []pollStep
		busy  time.Duration // the operator's time on each record of a after the first
		late  []wEvent
	}{
		{"busy", []pollStep{{recs: []wEvent{onSplit(0, 1000), onSplit(1, 1000)}}, {recs: []wEvent{onSplit(0, 5000)}}, {recs: []wEvent{late}}},
			2 * idleness, nil},
		{"waiting", []pollStep{{recs: []wEvent{onSplit(0, 1000), onSplit(1, 1000)}}, {wait: 2 * idleness, recs: []wEvent{onSplit(0, 5000)}}, {recs: []wEvent{late}}},
			0, []wEvent{late}},
		{"backlog", append(slices.Clip(backlog), pollStep{recs: []wEvent{late}}), 300 * time.Millisecond, []wEvent{late}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := &fakeClock{start: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)}
			job := stream.NewJob("idleness")
			src := stream.SourceWithWatermarks(job, "events", func(context.Context, engine.TaskInfo, []checkpoint.SourcePosition) (engine.SourceReader[wEvent], error) {
				return &pollScript{clock: clock, steps: tc.steps}, nil
			}, stream.Watermarks[wEvent]{Idleness: idleness})
			worked := stream.Map(src, "work", func(e wEvent) (wEvent, error) {
				if e.Key == 0 && e.TS > wBase+1000 {
					clock.advance(tc.busy)
				}
				return e, nil
			})
			win := stream.Aggregate(stream.KeyByPartitioned(worked, "by-key", func(e wEvent) uint64 { return e.Key }, state.Uint64()), "windows",
				stream.Tumbling(100*time.Millisecond), stream.WindowOptions{}, state.Int64(), countAdd, countMerge, countResult)
			res, lateOut := newTxnStore[wResult](), newTxnStore[wEvent]()
			stream.Sink(win.Results, "sink", res.sink())
			stream.Sink(win.Late, "late", lateOut.sink())
			plan, err := job.Build()
			if err != nil {
				t.Fatal(err)
			}
			err = engine.Run(t.Context(), plan, engine.Config{Tasks: []int{0}, Storage: checkpoint.NewMemory(checkpoint.MemoryOptions{}),
				StateDir: t.TempDir(), Now: clock.now})
			if err != nil {
				t.Fatal(err)
			}
			if got := lateOut.visible(); !slices.Equal(got, tc.late) {
				t.Fatalf("late records %+v, want %+v", got, tc.late)
			}
			counted, total := int64(0), 0
			for _, r := range res.visible() {
				counted += r.Count
			}
			for _, s := range tc.steps {
				total += len(s.recs)
			}
			if want := int64(total - len(tc.late)); counted != want {
				t.Fatalf("windows counted %d records, want %d (all but the late)", counted, want)
			}
		})
	}
}
