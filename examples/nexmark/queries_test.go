package nexmark_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/examples/nexmark"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/worker"
)

// The queries' graphs run with engine.Run, over slices (so in one task:
// KeyBy moves nothing without Kafka), with the memory backend, over
// 20,000 generated events (200 s of event time), and their results are
// compared with references computed here from the same events. Each runs
// twice: straight through, and failing once after a checkpoint, so that
// the task restores its state and replays the records after it (the sink
// keeps only what checkpoints commit). The events are in order, so no
// record is late and every result can be matched exactly.

var dataset = sync.OnceValue(func() []nexmark.Event {
	g, err := nexmark.NewGenerator(testConfig())
	if err != nil {
		panic(err)
	}
	evs := make([]nexmark.Event, 20_000)
	for i := range evs {
		evs[i] = g.Event(int64(i))
	}
	return evs
})

// committed is a two-phase-commit sink in memory: what a task writes
// between two checkpoints is a transaction, pre-committed at the first's
// barrier and committed when it completes, or on restore from it. An
// attempt that fails loses what it had not pre-committed; a restored task
// drops the transactions its checkpoint does not name.
type committed[T any] struct {
	mu      sync.Mutex
	out     []T
	pending map[string][]T // by transaction
	seq     int
}

type committer[T any] struct {
	c    *committed[T]
	op   string
	buf  []T
	open []openTxn
}

type openTxn struct {
	id  checkpoint.ID
	txn string
}

func (c *committed[T]) Open(_ context.Context, info engine.TaskInfo, restored []checkpoint.Committable) (engine.SinkWriter[T], error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range restored {
		c.out = append(c.out, c.pending[r.TransactionalID]...) // a no-op if committed already
		delete(c.pending, r.TransactionalID)
	}
	clear(c.pending) // one task: every other transaction was its, and is aborted
	return &committer[T]{c: c, op: info.Operator}, nil
}

func (w *committer[T]) Write(_ context.Context, v T) error {
	w.buf = append(w.buf, v)
	return nil
}

func (w *committer[T]) PreCommit(_ context.Context, id checkpoint.ID) ([]checkpoint.Committable, error) {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	if len(w.buf) > 0 {
		w.c.seq++
		txn := fmt.Sprint("txn-", w.c.seq)
		if w.c.pending == nil {
			w.c.pending = map[string][]T{}
		}
		w.c.pending[txn], w.buf = w.buf, nil
		w.open = append(w.open, openTxn{id, txn})
	}
	cs := make([]checkpoint.Committable, 0, len(w.open))
	for _, o := range w.open {
		cs = append(cs, checkpoint.Committable{Operator: w.op, TransactionalID: o.txn})
	}
	return cs, nil
}

func (w *committer[T]) Commit(_ context.Context, id checkpoint.ID) error {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	keep := w.open[:0]
	for _, o := range w.open {
		if o.id > id {
			keep = append(keep, o)
			continue
		}
		w.c.out = append(w.c.out, w.c.pending[o.txn]...)
		delete(w.c.pending, o.txn)
	}
	w.open = keep
	return nil
}

func (w *committer[T]) Close() error { return nil }

var errInjected = errors.New("injected failure")

// failOnce fails the task once, at the first poll after record failAt
// has been read and a checkpoint completed.
type failOnce struct {
	engine.NopObserver
	failAt      int64
	checkpoints atomic.Int64
	failed      atomic.Bool
	restoredAt  atomic.Int64 // the checkpoint the restarted task restored
}

func (f *failOnce) CheckpointCompleted(string, int, checkpoint.Manifest) { f.checkpoints.Add(1) }

func (f *failOnce) TaskRestored(_ string, _ int, _ int64, from checkpoint.ID, _ time.Duration) {
	if f.failed.Load() {
		f.restoredAt.Store(int64(from))
	}
}

func (f *failOnce) source(inner engine.SourceFactory[nexmark.Event]) engine.SourceFactory[nexmark.Event] {
	return func(ctx context.Context, info engine.TaskInfo, restored []checkpoint.SourcePosition) (engine.SourceReader[nexmark.Event], error) {
		r, err := inner(ctx, info, restored)
		return &failingReader{SourceReader: r, f: f}, err
	}
}

type failingReader struct {
	engine.SourceReader[nexmark.Event]
	f *failOnce
}

func (r *failingReader) Poll(ctx context.Context, b *engine.Batch[nexmark.Event]) error {
	if r.f.failed.Load() || r.Positions()[0].Offset < r.f.failAt {
		return r.SourceReader.Poll(ctx, b)
	}
	if r.f.checkpoints.Load() == 0 {
		// No record ready, as the contract allows: the runtime takes its
		// periodic checkpoint meanwhile.
		t := time.NewTimer(5 * time.Millisecond)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		return nil
	}
	r.f.failed.Store(true)
	return errInjected
}

// run runs a query's graph over the dataset, with the events' event time;
// with restore, its task fails once half way and restores.
func run[T any](t *testing.T, restore bool, query func(stream.Stream[nexmark.Event]) stream.Stream[T]) []T {
	t.Helper()
	out := &committed[T]{}
	src := stream.SliceSource([][]nexmark.Event{dataset()})
	cfg := engine.Config{
		Tasks: []int{0}, Storage: checkpoint.NewMemory(checkpoint.MemoryOptions{}), StateDir: t.TempDir(),
		Checkpoint: checkpoint.Config{Interval: 2 * time.Millisecond}, RestartBackoff: time.Millisecond,
	}
	f := &failOnce{failAt: int64(len(dataset()) / 2)}
	if restore {
		src = f.source(src)
		cfg.Observer = f
	}
	job := stream.NewJob("nexmark")
	stream.Sink(query(stream.SourceWithWatermarks(job, "events", src, nexmark.EventTime)), "output", out)
	plan, err := job.Build()
	if err != nil {
		t.Fatal(err)
	}
	if err := engine.Run(t.Context(), plan, cfg); err != nil {
		t.Fatal(err)
	}
	if restore {
		if !f.failed.Load() || f.restoredAt.Load() == 0 {
			t.Fatalf("the task did not fail and restore from a checkpoint (failed %v, restored checkpoint %d)", f.failed.Load(), f.restoredAt.Load())
		}
		t.Logf("failed after record %d, restored checkpoint %d", f.failAt, f.restoredAt.Load())
	}
	return out.out
}

// each runs check straight through and with a restore.
func each(t *testing.T, check func(t *testing.T, restore bool)) {
	for _, restore := range []bool{false, true} {
		t.Run(map[bool]string{false: "straight", true: "restore"}[restore], func(t *testing.T) { check(t, restore) })
	}
}

// same fails t unless got and want hold the same results, in the order
// that sort puts them (nil: as they are).
func same[T any](t *testing.T, got, want []T, order func(a, b T) int) {
	t.Helper()
	if order != nil {
		slices.SortFunc(got, order)
		slices.SortFunc(want, order)
	}
	t.Logf("%d results", len(got))
	if len(want) == 0 {
		t.Fatal("the reference has no result: the test data does not exercise the query")
	}
	for i := range max(len(got), len(want)) {
		switch {
		case i >= len(got):
			t.Fatalf("%d results, want %d: missing %+v", len(got), len(want), want[i])
		case i >= len(want):
			t.Fatalf("%d results, want %d: extra %+v", len(got), len(want), got[i])
		case fmt.Sprint(got[i]) != fmt.Sprint(want[i]):
			t.Fatalf("result %d is %+v, want %+v", i, got[i], want[i])
		}
	}
}

func bidsOf(evs []nexmark.Event) []nexmark.Bid {
	var bs []nexmark.Bid
	for _, e := range evs {
		if e.Bid != nil {
			bs = append(bs, *e.Bid)
		}
	}
	return bs
}

func TestQ0(t *testing.T) {
	each(t, func(t *testing.T, restore bool) {
		same(t, run(t, restore, nexmark.Q0), bidsOf(dataset()), nil)
	})
}

func TestQ1(t *testing.T) {
	var want []nexmark.Bid
	for _, b := range bidsOf(dataset()) {
		b.Price = b.Price * 908 / 1000
		want = append(want, b)
	}
	each(t, func(t *testing.T, restore bool) { same(t, run(t, restore, nexmark.Q1), want, nil) })
}

func TestQ2(t *testing.T) {
	var want []nexmark.Q2Out
	for _, b := range bidsOf(dataset()) {
		if b.Auction%123 == 0 {
			want = append(want, nexmark.Q2Out{Auction: b.Auction, Price: b.Price})
		}
	}
	each(t, func(t *testing.T, restore bool) { same(t, run(t, restore, nexmark.Q2), want, nil) })
}

// TestQ3: every pair of a person in OR, ID or CA and an auction of theirs
// in category 10, whichever came first (sellers may be drawn up to 10
// persons ahead), once.
func TestQ3(t *testing.T) {
	persons := map[int64]*nexmark.Person{}
	for _, e := range dataset() {
		if e.Person != nil {
			persons[e.Person.ID] = e.Person
		}
	}
	var want []nexmark.Q3Out
	early := 0
	for _, e := range dataset() {
		a := e.Auction
		if a == nil || a.Category != 10 {
			continue
		}
		p := persons[a.Seller]
		if p == nil || p.State != "OR" && p.State != "ID" && p.State != "CA" {
			continue
		}
		if p.DateTime.After(a.DateTime) {
			early++
		}
		want = append(want, nexmark.Q3Out{Name: p.Name, City: p.City, State: p.State, Auction: a.ID})
	}
	t.Logf("%d of %d auctions came before their seller", early, len(want))
	each(t, func(t *testing.T, restore bool) {
		same(t, run(t, restore, nexmark.Q3), want, func(a, b nexmark.Q3Out) int { return cmp.Compare(a.Auction, b.Auction) })
	})
}

// TestQ5: per sliding window (10 s every 2 s), the auctions with the most
// bids.
func TestQ5(t *testing.T) {
	counts := map[int64]map[int64]int64{} // window end -> auction -> bids
	for _, b := range bidsOf(dataset()) {
		ts := b.DateTime.UnixMilli()
		for start := ts - ts%2000; start > ts-10_000; start -= 2000 {
			end := start + 10_000
			if counts[end] == nil {
				counts[end] = map[int64]int64{}
			}
			counts[end][b.Auction]++
		}
	}
	var want []nexmark.Q5Out
	ties := 0
	for end, byAuction := range counts {
		var most int64
		for _, n := range byAuction {
			most = max(most, n)
		}
		hot := 0
		for auction, n := range byAuction {
			if n == most {
				hot++
				e := time.UnixMilli(end).UTC()
				want = append(want, nexmark.Q5Out{Auction: auction, Num: n, Start: e.Add(-10 * time.Second), End: e})
			}
		}
		if hot > 1 {
			ties++
		}
	}
	t.Logf("%d windows, %d with a tie", len(counts), ties)
	each(t, func(t *testing.T, restore bool) {
		same(t, run(t, restore, nexmark.Q5), want, func(a, b nexmark.Q5Out) int {
			return cmp.Or(a.End.Compare(b.End), cmp.Compare(a.Auction, b.Auction))
		})
	})
}

// TestQ7: per tumbling window of 10 s, the bids at the highest price.
func TestQ7(t *testing.T) {
	top := map[int64][]nexmark.Bid{} // window start -> highest bids
	for _, b := range bidsOf(dataset()) {
		ts := b.DateTime.UnixMilli()
		w := ts - ts%10_000
		switch cur := top[w]; {
		case len(cur) == 0 || b.Price > cur[0].Price:
			top[w] = []nexmark.Bid{b}
		case b.Price == cur[0].Price:
			top[w] = append(cur, b)
		}
	}
	var want []nexmark.Q7Out
	for w, bs := range top {
		for _, b := range bs {
			start := time.UnixMilli(w).UTC()
			want = append(want, nexmark.Q7Out{Auction: b.Auction, Bidder: b.Bidder, Price: b.Price, DateTime: b.DateTime, Extra: b.Extra, Start: start, End: start.Add(10 * time.Second)})
		}
	}
	t.Logf("%d windows", len(top))
	each(t, func(t *testing.T, restore bool) {
		same(t, run(t, restore, nexmark.Q7), want, func(a, b nexmark.Q7Out) int {
			return cmp.Or(a.Start.Compare(b.Start), a.DateTime.Compare(b.DateTime), cmp.Compare(a.Auction, b.Auction), cmp.Compare(a.Bidder, b.Bidder))
		})
	})
}

// TestQ8: per tumbling window of 10 s, the persons who joined in it and
// put up an auction in it too, once each however many auctions.
func TestQ8(t *testing.T) {
	window := func(at time.Time) int64 { ts := at.UnixMilli(); return ts - ts%10_000 }
	type sw struct{ seller, window int64 }
	sold := map[sw]int{}
	for _, e := range dataset() {
		if a := e.Auction; a != nil {
			sold[sw{a.Seller, window(a.DateTime)}]++
		}
	}
	var want []nexmark.Q8Out
	several := 0
	for _, e := range dataset() {
		p := e.Person
		if p == nil {
			continue
		}
		w := window(p.DateTime)
		if n := sold[sw{p.ID, w}]; n > 0 {
			if n > 1 {
				several++
			}
			start := time.UnixMilli(w).UTC()
			want = append(want, nexmark.Q8Out{ID: p.ID, Name: p.Name, Start: start, End: start.Add(10 * time.Second)})
		}
	}
	t.Logf("%d of %d new sellers with several auctions in their window", several, len(want))
	each(t, func(t *testing.T, restore bool) {
		same(t, run(t, restore, nexmark.Q8), want, func(a, b nexmark.Q8Out) int {
			return cmp.Or(a.Start.Compare(b.Start), cmp.Compare(a.ID, b.ID))
		})
	})
}

// TestJobs: the jobs registered themselves under their names, for
// `processor run --job`. Building them needs a worker's Kafka: they run in
// TestWorkerJobs and the integration tests.
func TestJobs(t *testing.T) {
	var names []string
	for _, j := range worker.Registered() {
		if strings.HasPrefix(j.Name(), "nexmark-") {
			names = append(names, j.Name())
		}
	}
	want := []string{"nexmark-q0", "nexmark-q1", "nexmark-q2", "nexmark-q3", "nexmark-q5", "nexmark-q7", "nexmark-q8"}
	if !slices.Equal(names, want) {
		t.Errorf("jobs %q, want %q", names, want)
	}
}
