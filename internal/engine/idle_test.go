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

// TestIdlenessCountsOnlyWaitingTime: split b goes idle when the source has
// waited for input for the idleness without a record of b ("waiting": b's
// next record is then late), not when the source spent that long on a
// batch of split a ("busy": an operator behind it was slow, or its output
// full) and so had no chance to read b: b's next record is on time, as it
// would have been had the batch taken no time.
func TestIdlenessCountsOnlyWaitingTime(t *testing.T) {
	const idleness = time.Second
	slow := onSplit(0, 1001)
	for _, tc := range []struct {
		name       string
		waitInPoll time.Duration // before the poll that returns slow
		busyOnSlow time.Duration // the operator's time on slow
		late       []wEvent
	}{
		{name: "busy", busyOnSlow: 2 * idleness},
		// b is idle from the second poll on: the watermark follows a's,
		// to +4999 ms, past b's record's window.
		{name: "waiting", waitInPoll: 2 * idleness, late: []wEvent{onSplit(1, 1500)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := &fakeClock{start: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)}
			steps := []pollStep{
				{recs: []wEvent{onSplit(0, 1000), onSplit(1, 1000)}},
				{wait: tc.waitInPoll, recs: []wEvent{slow}},
				{recs: []wEvent{onSplit(0, 5000)}},
				// On time for b, whose watermark is at +999 ms.
				{recs: []wEvent{onSplit(1, 1500)}},
			}
			job := stream.NewJob("idleness")
			src := stream.SourceWithWatermarks(job, "events", func(context.Context, engine.TaskInfo, []checkpoint.SourcePosition) (engine.SourceReader[wEvent], error) {
				return &pollScript{clock: clock, steps: steps}, nil
			}, stream.Watermarks[wEvent]{Idleness: idleness})
			worked := stream.Map(src, "work", func(e wEvent) (wEvent, error) {
				if e == slow {
					clock.advance(tc.busyOnSlow)
				}
				return e, nil
			})
			win := stream.Aggregate(stream.KeyByPartitioned(worked, "by-key", func(e wEvent) uint64 { return e.Key }, state.Uint64()), "windows",
				stream.Tumbling(100*time.Millisecond), stream.WindowOptions{}, state.Int64(), countAdd, countMerge, countResult)
			res, late := newTxnStore[wResult](), newTxnStore[wEvent]()
			stream.Sink(win.Results, "sink", res.sink())
			stream.Sink(win.Late, "late", late.sink())
			plan, err := job.Build()
			if err != nil {
				t.Fatal(err)
			}
			err = engine.Run(t.Context(), plan, engine.Config{Tasks: []int{0}, Storage: checkpoint.NewMemory(checkpoint.MemoryOptions{}),
				StateDir: t.TempDir(), Now: clock.now})
			if err != nil {
				t.Fatal(err)
			}
			if got := late.visible(); !slices.Equal(got, tc.late) {
				t.Fatalf("late records %+v, want %+v", got, tc.late)
			}
			counted, total := int64(0), 0
			for _, r := range res.visible() {
				counted += r.Count
			}
			for _, s := range steps {
				total += len(s.recs)
			}
			if want := int64(total - len(tc.late)); counted != want {
				t.Fatalf("windows counted %d records, want %d (all but the late)", counted, want)
			}
		})
	}
}
