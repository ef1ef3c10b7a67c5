package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/examples/nexmark"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/internal/testcluster"
	"github.com/weirstream/weir/stream"
)

// collect is a sink that keeps what it is given: for a graph run straight
// through, without failures.
type collect[T any] struct {
	mu  sync.Mutex
	out []T
}

func (c *collect[T]) Open(context.Context, engine.TaskInfo, []checkpoint.Committable) (engine.SinkWriter[T], error) {
	return c, nil
}

func (c *collect[T]) Write(_ context.Context, v T) error {
	c.mu.Lock()
	c.out = append(c.out, v)
	c.mu.Unlock()
	return nil
}

func (c *collect[T]) PreCommit(context.Context, checkpoint.ID) ([]checkpoint.Committable, error) {
	return nil, nil
}
func (c *collect[T]) Commit(context.Context, checkpoint.ID) error { return nil }
func (c *collect[T]) Close() error                                { return nil }

// TestNexmarkAcrossWorkers: Nexmark q5 (hot items: each auction's bids in
// sliding event-time windows, repartitioned by window, the most of each)
// on three workers, one killed with SIGKILL half way and another joining.
// Event time crosses the repartition topic, so the output must be exactly
// the results of q5's graph run in one task, for every window the input's
// event time has passed: none missing, none twice, none late.
func TestNexmarkAcrossWorkers(t *testing.T) {
	c := testcluster.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	const partitions = 4
	j := newCountJob(t, c, partitions)

	gc := nexmark.DefaultConfig(time.Now().Truncate(time.Second))
	gc.EventsPerSecond = 100 // 200 s of event time: 100 windows of 2 s
	g, err := nexmark.NewGenerator(gc)
	if err != nil {
		t.Fatal(err)
	}
	events := make([]nexmark.Event, 20_000)
	recs := make([]*kgo.Record, len(events))
	for i := range events {
		events[i] = g.Event(int64(i))
		if recs[i], err = nexmark.Encode(events[i]); err != nil {
			t.Fatal(err)
		}
		recs[i].Topic = j.input
	}
	cl := c.Client(t)
	write := func(rs []*kgo.Record) {
		t.Helper()
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	run := func(name string) *proc {
		return j.run(name, "", append([]string{"--job", "nexmark-q5"}, groupFlags...)...)
	}
	workers := []*proc{run("w1"), run("w2"), run("w3")}
	addrs := map[*proc]string{}
	for _, w := range workers {
		addrs[w] = httpAddr(ctx, t, w)
	}
	waitEachTaskOnce(ctx, t, workers, addrs, partitions, 90*time.Second)
	half := len(recs) / 2
	write(recs[:half])
	// A worker dies with its tasks' transactions open, and a new one joins.
	workers[0].Kill9()
	w4 := run("w4")
	addrs[w4] = httpAddr(ctx, t, w4)
	write(recs[half:])
	live := []*proc{workers[1], workers[2], w4}
	waitEachTaskOnce(ctx, t, live, addrs, partitions, 90*time.Second)

	// The reference, and how far the jobs' event time reaches: the least
	// over the partitions of their newest event, less the out-of-orderness.
	// A window [Start, End) fires once it reaches End-1.
	ref := &collect[nexmark.Q5Out]{}
	job := stream.NewJob("reference")
	ev := stream.SourceWithWatermarks(job, "events", stream.SliceSource([][]nexmark.Event{events}), nexmark.EventTime)
	stream.Sink(nexmark.Q5(ev), "output", ref)
	plan, err := job.Build()
	if err != nil {
		t.Fatal(err)
	}
	if err := engine.Run(ctx, plan, engine.Config{Tasks: []int{0}, Storage: checkpoint.NewMemory(checkpoint.MemoryOptions{}), StateDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	newest := map[int32]int64{}
	for i, e := range events {
		newest[recs[i].Partition] = max(newest[recs[i].Partition], e.Time().UnixMilli())
	}
	watermark := int64(math.MaxInt64)
	for _, ts := range newest {
		watermark = min(watermark, ts-nexmark.OutOfOrderness.Milliseconds()-1)
	}
	var want []string
	for _, o := range ref.out {
		if o.End.UnixMilli()-1 <= watermark {
			want = append(want, fmt.Sprint(o))
		}
	}
	if len(want) < 100 {
		t.Fatalf("the reference has %d results in windows that fire: the data does not exercise q5", len(want))
	}

	// Every result, then, with the workers stopped, a quiet while for any
	// extra one.
	out := c.Client(t, kgo.ConsumeTopics(j.output), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var got []string
	deadline := time.Now().Add(2 * time.Minute)
	read := func(until func() bool) {
		t.Helper()
		for !until() {
			pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			fs := out.PollFetches(pctx)
			cancel()
			if ctx.Err() != nil || time.Now().After(deadline) {
				t.Fatalf("%d results of %d within 2 minutes", len(got), len(want))
			}
			fs.EachRecord(func(r *kgo.Record) {
				var q nexmark.Q5Out
				if err := json.Unmarshal(r.Value, &q); err != nil {
					t.Fatalf("result %s/%d@%d: %v", r.Topic, r.Partition, r.Offset, err)
				}
				q.Start, q.End = q.Start.UTC(), q.End.UTC()
				got = append(got, fmt.Sprint(q))
			})
		}
	}
	read(func() bool { return len(got) >= len(want) })
	for _, w := range live {
		if err, graceful := w.Terminate(60 * time.Second); err != nil || !graceful {
			t.Errorf("%s on SIGTERM: %v", w.name, err)
		}
	}
	quiet := time.Now().Add(3 * time.Second)
	read(func() bool { return time.Now().After(quiet) })

	slices.Sort(got)
	slices.Sort(want)
	t.Logf("%d results, the reference's %d", len(got), len(want))
	for i := range max(len(got), len(want)) {
		if i >= len(got) || i >= len(want) || got[i] != want[i] {
			t.Fatalf("result %d: got %v, want %v", i, at(got, i), at(want, i))
		}
	}
}

func at(xs []string, i int) string {
	if i < len(xs) {
		return xs[i]
	}
	return "(none)"
}
