package nexmark_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/examples/nexmark"
	"github.com/weirstream/weir/internal/testcluster"
	"github.com/weirstream/weir/runtime"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/worker"
)

// TestWorkerJobs runs each query's worker job on Kafka (kfake unless
// KAFKA_BROKERS names a broker): 4 tasks in one worker over the 20,000
// events in 4 partitions, keyed as Encode keys them. The jobs without event
// time after a repartition (q0, q1, q2, and q3, whose join repartitions the
// auctions by seller and must meet each seller's own record) must write
// exactly the results of the query's graph run with runtime.Run. q5, q7 and q8 cannot match it exactly:
// after their repartition hop they derive event time again from record
// timestamps, and the tasks race through the backlog at their own speeds,
// so the records of a task that lags by more than HopOutOfOrderness come
// late. Their results are checked for what holds all the same: q8's are
// the reference's (a late auction is dropped, not made up); q5's counts
// are right and q7's bids real, and a window's results are ties.
func TestWorkerJobs(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs the jobs on Kafka")
	}
	c := testcluster.Kafka(t)
	input := testcluster.UniqueName(t, "events")
	c.CreateTopics(t, 4, input)
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

	for _, tc := range []struct {
		job   string
		want  int // results, all of them the reference's (exact)
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
		{job: "nexmark-q5", check: func(t *testing.T, vals [][]byte) {
			// An auction's count is right even in a window decided without
			// some task's counts: its bids are all in its partition.
			type aw struct {
				auction int64
				end     time.Time
			}
			counts := map[aw]int64{}
			for _, b := range bidsOf(dataset()) {
				ts := b.DateTime.UnixMilli()
				for start := ts - ts%2000; start > ts-10_000; start -= 2000 {
					counts[aw{b.Auction, time.UnixMilli(start + 10_000).UTC()}]++
				}
			}
			byWindow(t, vals, queryResults(t, nexmark.Q5), func(o nexmark.Q5Out) (nexmark.Q5Out, time.Time, bool, int64) {
				o.Start, o.End = o.Start.UTC(), o.End.UTC()
				if n := counts[aw{o.Auction, o.End}]; n != o.Num {
					t.Errorf("%+v: the auction has %d bids in the window", o, n)
				}
				return o, o.End, o.Late, o.Num
			})
		}},
		{job: "nexmark-q7", check: func(t *testing.T, vals [][]byte) {
			// A bid is one of its window's even in a window decided
			// without some task's highest bids.
			bids := map[string]bool{}
			for _, b := range bidsOf(dataset()) {
				bids[fmt.Sprint(b.Auction, b.Bidder, b.Price, b.DateTime.UnixMilli())] = true
			}
			byWindow(t, vals, queryResults(t, nexmark.Q7), func(o nexmark.Q7Out) (nexmark.Q7Out, time.Time, bool, int64) {
				o.Start, o.End, o.DateTime = o.Start.UTC(), o.End.UTC(), o.DateTime.UTC()
				if !bids[fmt.Sprint(o.Auction, o.Bidder, o.Price, o.DateTime.UnixMilli())] || o.DateTime.Before(o.Start) || !o.DateTime.Before(o.End) {
					t.Errorf("%+v is not a bid of its window", o)
				}
				return o, o.End, o.Late, o.Price
			})
		}},
		{job: "nexmark-q8", check: func(t *testing.T, vals [][]byte) {
			want := queryResults(t, nexmark.Q8)
			for _, v := range vals {
				var o nexmark.Q8Out
				if err := json.Unmarshal(v, &o); err != nil {
					t.Fatal(err)
				}
				o.Start, o.End = o.Start.UTC(), o.End.UTC()
				if !slices.Contains(want, o) {
					t.Errorf("%+v is not in the reference", o)
				}
			}
		}},
	} {
		t.Run(tc.job, func(t *testing.T) {
			output := testcluster.UniqueName(t, "out")
			c.CreateTopics(t, 4, output)
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
				done <- worker.Run(runCtx, cfg, nexmark.Jobs(), worker.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
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

// byWindow checks the results of a job whose windows are decided after a
// repartition hop, by what holds whatever came late: each result passes
// norm's checks, and a window's results (those not late) are its ties, at
// one level (q5's count, q7's price). Whether a window is the reference's
// depends on whether some task's records came after it was decided, and
// on whether they had come when the test stopped reading: that is only
// logged.
func byWindow[T any](t *testing.T, vals [][]byte, want []T, norm func(T) (o T, end time.Time, late bool, level int64)) {
	t.Helper()
	got, ref := map[time.Time][]string{}, map[time.Time][]string{}
	level := map[time.Time]int64{}
	late := 0
	for _, v := range vals {
		var o T
		if err := json.Unmarshal(v, &o); err != nil {
			t.Fatal(err)
		}
		o, end, isLate, lv := norm(o)
		if isLate {
			late++
			continue
		}
		if l, ok := level[end]; ok && l != lv {
			t.Errorf("window ending %v: results at %d and %d", end, l, lv)
		}
		level[end] = lv
		got[end] = append(got[end], fmt.Sprint(o))
	}
	for _, o := range want {
		o, end, _, _ := norm(o)
		ref[end] = append(ref[end], fmt.Sprint(o))
	}
	matched := 0
	for end, os := range got {
		slices.Sort(os)
		slices.Sort(ref[end])
		if slices.Equal(os, ref[end]) {
			matched++
		}
	}
	t.Logf("%d windows decided of %d, %d of them as the reference; %d late results", len(got), len(ref), matched, late)
	if len(got) == 0 {
		t.Error("no window decided")
	}
}

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

// queryResults is what the query's graph writes, run with runtime.Run.
func queryResults[T any](t *testing.T, build func(*stream.Job, runtime.SourceFactory[nexmark.Event], runtime.SinkFactory[T])) []T {
	t.Helper()
	return run(t, false, build)
}
