package nexmark_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/examples/nexmark"
	"github.com/weirstream/weir/internal/testcluster"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/worker"
)

// TestWorkerJobs runs each query's worker job on Kafka (kfake unless
// KAFKA_BROKERS names a broker): 4 tasks in one worker over the 20,000
// events in 4 partitions, keyed as Encode keys them. Each must write
// exactly the results of the query's graph run with engine.Run, as far
// as the input's event time reaches: the input does not end, so windows
// after the least watermark of its partitions never fire. q3, q5, q7 and
// q8 repartition, and event time goes on across the hop: no result is
// late, and each window is decided with the records of every task.
func TestWorkerJobs(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs the jobs on Kafka")
	}
	c := testcluster.Kafka(t)
	input := testcluster.UniqueName(t, "events")
	// The events are of 2026-01-01: a broker's time retention (7 days)
	// would delete them at its next check.
	keep := "-1"
	c.CreateTopicsWith(t, 4, map[string]*string{"retention.ms": &keep}, input)
	cl := c.Client(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var recs []*kgo.Record
	for _, e := range dataset() {
		r, err := nexmark.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		r.Topic = input
		recs = append(recs, r)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// The jobs' event time ends at the least over the partitions of their
	// newest event, less the out-of-orderness: a window [Start, End) fires
	// once it reaches End-1.
	newest := map[int32]int64{}
	for i, e := range dataset() {
		p := recs[i].Partition
		newest[p] = max(newest[p], e.Time().UnixMilli())
	}
	watermark := int64(math.MaxInt64)
	for _, ts := range newest {
		watermark = min(watermark, ts-nexmark.OutOfOrderness.Milliseconds()-1)
	}
	fired := func(end time.Time) bool { return end.UnixMilli()-1 <= watermark }

	for _, tc := range []struct {
		job   string
		want  int // results
		check func(t *testing.T, vals [][]byte)
	}{
		{job: "nexmark-q0", want: len(bidsOf(dataset())), check: func(t *testing.T, vals [][]byte) {
			exactly(t, vals, queryResults(t, nexmark.Q0), func(b nexmark.Bid) nexmark.Bid { b.DateTime = b.DateTime.UTC(); return b })
		}},
		{job: "nexmark-q1", want: len(bidsOf(dataset())), check: func(t *testing.T, vals [][]byte) {
			exactly(t, vals, queryResults(t, nexmark.Q1), func(b nexmark.Bid) nexmark.Bid { b.DateTime = b.DateTime.UTC(); return b })
		}},
		{job: "nexmark-q2", want: 99, check: func(t *testing.T, vals [][]byte) {
			exactly(t, vals, queryResults(t, nexmark.Q2), func(o nexmark.Q2Out) nexmark.Q2Out { return o })
		}},
		{job: "nexmark-q3", want: 105, check: func(t *testing.T, vals [][]byte) {
			exactly(t, vals, queryResults(t, nexmark.Q3), func(o nexmark.Q3Out) nexmark.Q3Out { return o })
		}},
		{job: "nexmark-q5", want: countFired(queryResults(t, nexmark.Q5), func(o nexmark.Q5Out) bool { return fired(o.End) }), check: func(t *testing.T, vals [][]byte) {
			want := filter(queryResults(t, nexmark.Q5), func(o nexmark.Q5Out) bool { return fired(o.End) })
			exactly(t, vals, want, func(o nexmark.Q5Out) nexmark.Q5Out { o.Start, o.End = o.Start.UTC(), o.End.UTC(); return o })
		}},
		{job: "nexmark-q7", want: countFired(queryResults(t, nexmark.Q7), func(o nexmark.Q7Out) bool { return fired(o.End) }), check: func(t *testing.T, vals [][]byte) {
			want := filter(queryResults(t, nexmark.Q7), func(o nexmark.Q7Out) bool { return fired(o.End) })
			exactly(t, vals, want, func(o nexmark.Q7Out) nexmark.Q7Out {
				o.Start, o.End, o.DateTime = o.Start.UTC(), o.End.UTC(), o.DateTime.UTC()
				return o
			})
		}},
		{job: "nexmark-q8", want: countFired(queryResults(t, nexmark.Q8), func(o nexmark.Q8Out) bool { return fired(o.End) }), check: func(t *testing.T, vals [][]byte) {
			want := filter(queryResults(t, nexmark.Q8), func(o nexmark.Q8Out) bool { return fired(o.End) })
			exactly(t, vals, want, func(o nexmark.Q8Out) nexmark.Q8Out { o.Start, o.End = o.Start.UTC(), o.End.UTC(); return o })
		}},
	} {
		t.Run(tc.job, func(t *testing.T) {
			output := testcluster.UniqueName(t, "out")
			c.CreateTopicsWith(t, 4, map[string]*string{"retention.ms": &keep}, output)
			cfg := worker.DefaultConfig()
			cfg.Brokers = c.Brokers
			cfg.Job, cfg.Name = tc.job, testcluster.UniqueName(t, "job")
			cfg.Input, cfg.Output = input, output
			cfg.Tasks = []int{0, 1, 2, 3}
			cfg.Checkpoints, cfg.StateBackend, cfg.StateDir = "memory", "memory", t.TempDir()
			cfg.Interval = 50 * time.Millisecond
			cfg.HTTPAddr = "off"
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				done <- worker.Run(runCtx, cfg, worker.Registered(), worker.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			}()
			vals := readUntil(ctx, t, c, output, tc.want, done)
			stop()
			if err := <-done; err != nil {
				t.Fatalf("worker: %v", err)
			}
			t.Logf("%d results", len(vals))
			if tc.check != nil {
				tc.check(t, vals)
			}
		})
	}
}

// exactly checks that the job wrote the results of the query's graph, in
// any order.
func exactly[T any](t *testing.T, vals [][]byte, want []T, norm func(T) T) {
	t.Helper()
	got := make([]string, 0, len(vals))
	for _, v := range vals {
		var o T
		if err := json.Unmarshal(v, &o); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprint(norm(o)))
	}
	ref := make([]string, 0, len(want))
	for _, o := range want {
		ref = append(ref, fmt.Sprint(o))
	}
	slices.Sort(got)
	slices.Sort(ref)
	same(t, got, ref, nil)
}

// filter is the elements of xs that keep says to.
func filter[T any](xs []T, keep func(T) bool) []T {
	var out []T
	for _, x := range xs {
		if keep(x) {
			out = append(out, x)
		}
	}
	return out
}

func countFired[T any](xs []T, keep func(T) bool) int { return len(filter(xs, keep)) }

// readUntil reads topic read_committed until it has n records (n = 0: at
// least one, and then until 3 polls in a row bring nothing new), the
// worker stops, or ctx ends.
func readUntil(ctx context.Context, t *testing.T, c *testcluster.Cluster, topic string, n int, done <-chan error) [][]byte {
	t.Helper()
	cl := c.Client(t, kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var vals [][]byte
	quiet := 0
	for {
		pollCtx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := cl.PollFetches(pollCtx)
		cancel()
		before := len(vals)
		fs.EachRecord(func(r *kgo.Record) { vals = append(vals, r.Value) })
		switch {
		case n > 0 && len(vals) >= n:
			return vals
		case n == 0 && len(vals) > 0 && len(vals) == before:
			if quiet++; quiet == 3 {
				return vals
			}
		case ctx.Err() != nil:
			t.Fatalf("%d results when the test timed out, want %d", len(vals), n)
		}
		select {
		case err := <-done:
			t.Fatalf("worker stopped with %d results: %v", len(vals), err)
		default:
		}
	}
}

// queryResults is what the query's graph writes, run with engine.Run.
func queryResults[T any](t *testing.T, query func(stream.Stream[nexmark.Event]) stream.Stream[T]) []T {
	t.Helper()
	return run(t, false, query)
}
