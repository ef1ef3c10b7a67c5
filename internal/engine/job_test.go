package engine_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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

// update is what the counting job emits: the running count and sum of a key
// after one record.
type update struct {
	Key   uint64
	Count int64
	Sum   int64
}

// countJob keys numbered records by n%keys (keys a multiple of parts, so
// that each key lives in one task, as Kafka partitioning would have it) and emits, for each record, the
// key's running count and sum. fail, if set, runs on every record before the
// keyed operator and may fail the task.
func countJob(t testing.TB, records int64, keys uint64, parts int, fail func(int64) error, sink engine.SinkOpener[update]) *engine.Plan {
	job := stream.NewJob("count")
	src := stream.Source(job, "numbers", stream.GeneratorSource(records, func(task int, i int64) int64 {
		return i*int64(parts) + int64(task)
	}))
	checked := stream.Map(src, "maybe-fail", func(n int64) (int64, error) {
		if fail != nil {
			if err := fail(n); err != nil {
				return 0, err
			}
		}
		return n, nil
	})
	keyed := stream.KeyByPartitioned(checked, "by-key", func(n int64) uint64 { return uint64(n) % keys }, state.Uint64())
	counts := stream.Process(keyed, "count", func(s *stream.Setup) (stream.Processor[uint64, int64, update], error) {
		count, err := stream.ValueState(s, "count", state.Int64())
		if err != nil {
			return stream.Processor[uint64, int64, update]{}, err
		}
		sum, err := stream.ValueState(s, "sum", state.Int64())
		if err != nil {
			return stream.Processor[uint64, int64, update]{}, err
		}
		return stream.Processor[uint64, int64, update]{
			Process: func(ctx *stream.Context[uint64, update], n int64) error {
				c, _, err := count.Get()
				if err != nil {
					return err
				}
				s, _, err := sum.Get()
				if err != nil {
					return err
				}
				c, s = c+1, s+n
				if err := count.Set(c); err != nil {
					return err
				}
				if err := sum.Set(s); err != nil {
					return err
				}
				return ctx.Emit(update{Key: ctx.Key(), Count: c, Sum: s})
			},
		}, nil
	})
	stream.Sink(counts, "out", sink)
	plan, err := job.Build()
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

// checkExactlyOnce asserts that for every key the committed updates count
// 1..n once each and end at the input's sum.
func checkExactlyOnce(t *testing.T, out []update, records int64, keys uint64, parts int) {
	t.Helper()
	wantCount := map[uint64]int64{}
	wantSum := map[uint64]int64{}
	for task := range parts {
		for i := range records {
			n := i*int64(parts) + int64(task)
			wantCount[uint64(n)%keys]++
			wantSum[uint64(n)%keys] += n
		}
	}
	seen := map[uint64][]int64{}
	last := map[uint64]update{}
	for _, u := range out {
		seen[u.Key] = append(seen[u.Key], u.Count)
		if u.Count > last[u.Key].Count {
			last[u.Key] = u
		}
	}
	dups, missing := 0, 0
	for k, n := range wantCount {
		counts := seen[k]
		slices.Sort(counts)
		have := map[int64]int{}
		for _, c := range counts {
			have[c]++
		}
		for c := int64(1); c <= n; c++ {
			switch have[c] {
			case 0:
				missing++
			case 1:
			default:
				dups += have[c] - 1
			}
		}
		if last[k].Sum != wantSum[k] {
			t.Errorf("key %d: final sum %d, want %d", k, last[k].Sum, wantSum[k])
		}
	}
	t.Logf("records in %d, updates out %d, duplicates %d, missing %d", records*int64(parts), len(out), dups, missing)
	if dups != 0 || missing != 0 {
		t.Fatalf("not exactly once: %d duplicates, %d missing", dups, missing)
	}
}

func TestCountExactlyOnceWithoutFailures(t *testing.T) {
	store := newTxnStore[update]()
	plan := countJob(t, 20000, 98, 2, nil, store.sink())
	err := engine.Run(t.Context(), plan, engine.Config{
		Tasks:      []int{0, 1},
		Storage:    checkpoint.NewMemory(checkpoint.MemoryOptions{}),
		Checkpoint: checkpoint.Config{Interval: 5 * time.Millisecond},
		StateDir:   t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, store.visible(), 20000, 98, 2)
}

// TestCrashAndRestore fails the job at 20 random points; every failure
// restarts the task from its latest checkpoint. The committed output must
// hold each record's effect exactly once.
func TestCrashAndRestore(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	const records, keys, parts = 500_000, 1000, 2
	if testing.Short() {
		t.Skip("long: 1M records through 20 failures")
	}
	// Failure points are counted in records processed, replays included, so
	// each point is passed (and fails) exactly once.
	var points []int64
	for range 20 {
		points = append(points, rng.Int64N(records*parts))
	}
	slices.Sort(points)
	var processed atomic.Int64
	var failed atomic.Int64
	var next atomic.Int64
	fail := func(int64) error {
		n := processed.Add(1)
		i := next.Load()
		if int(i) < len(points) && n >= points[i] && next.CompareAndSwap(i, i+1) {
			failed.Add(1)
			return fmt.Errorf("injected failure %d at record %d", i+1, n)
		}
		return nil
	}
	store := newTxnStore[update]()
	plan := countJob(t, records, keys, parts, fail, store.sink())
	err := engine.Run(t.Context(), plan, engine.Config{
		Tasks:          []int{0, 1},
		Storage:        checkpoint.NewMemory(checkpoint.MemoryOptions{}),
		Checkpoint:     checkpoint.Config{Interval: 10 * time.Millisecond},
		StateDir:       t.TempDir(),
		RestartBackoff: time.Millisecond,
		MaxRestarts:    -1,
	})
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	if failed.Load() != 20 {
		t.Fatalf("seed %d: %d failures injected, want 20", seed, failed.Load())
	}
	checkExactlyOnce(t, store.visible(), records, keys, parts)
}

func TestUserPanicFailsTaskNamingRecord(t *testing.T) {
	job := stream.NewJob("panics")
	src := stream.Source(job, "numbers", stream.GeneratorSource(100, func(_ int, i int64) int64 { return i }))
	m := stream.Map(src, "explode", func(n int64) (int64, error) {
		if n == 42 {
			panic("boom")
		}
		return n, nil
	})
	stream.Sink(m, "out", stream.DiscardSink[int64]())
	plan, err := job.Build()
	if err != nil {
		t.Fatal(err)
	}
	err = engine.Run(t.Context(), plan, engine.Config{
		Tasks:          []int{3},
		Storage:        checkpoint.NewMemory(checkpoint.MemoryOptions{}),
		StateDir:       t.TempDir(),
		RestartBackoff: time.Millisecond,
		MaxRestarts:    1,
	})
	var re *engine.RecordError
	if !errors.As(err, &re) {
		t.Fatalf("want a RecordError, got %v", err)
	}
	if re.Operator != "explode" || re.Task != 3 || re.Position.Offset != 42 || !errors.Is(err, engine.ErrPanic) {
		t.Fatalf("error does not name the operator, task and record: %v", err)
	}
	if !strings.Contains(err.Error(), "boom") {
		t.Fatalf("error lost the panic value: %v", err)
	}
}

func TestBuildReportsEveryError(t *testing.T) {
	job := stream.NewJob("bad job")
	src := stream.Source[int](job, "src", nil)
	stream.Map[int, int](src, "src", nil)
	_, err := job.Build()
	if err == nil {
		t.Fatal("build accepted a broken job")
	}
	for _, want := range []string{"job name", "factory is nil", "name used twice", "function is nil", "no sink"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("build error lacks %q: %v", want, err)
		}
	}
}

func TestRunRejectsBadConfigNamingTheSetting(t *testing.T) {
	plan := countJob(t, 10, 3, 1, nil, stream.DiscardSink[update]())
	err := engine.Run(context.Background(), plan, engine.Config{
		Checkpoint: checkpoint.Config{Interval: -time.Second},
	})
	for _, want := range []string{"tasks", "checkpoint storage", "interval"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("config error lacks %q: %v", want, err)
		}
	}
}

type failures struct {
	engine.NopObserver
	n          atomic.Int64
	restarting atomic.Bool
}

func (f *failures) TaskFailed(_ string, _ int, _ error, restarting bool) {
	f.n.Add(1)
	f.restarting.Store(restarting)
}

// TestSupersededTaskStops: a worker that finds a checkpoint of a newer owner
// (a higher fencing epoch) stops the task for good instead of restarting it
// and fencing the new owner's transactions.
func TestSupersededTaskStops(t *testing.T) {
	st := checkpoint.NewMemory(checkpoint.MemoryOptions{})
	plan := countJob(t, 1000, 10, 1, nil, stream.DiscardSink[update]())
	// The new owner (epoch 100) runs the job once and checkpoints it.
	if err := engine.Run(t.Context(), plan, engine.Config{Tasks: []int{0}, Storage: st, StateDir: t.TempDir(), Epoch: 100}); err != nil {
		t.Fatal(err)
	}
	obs := &failures{}
	err := engine.Run(t.Context(), plan, engine.Config{Tasks: []int{0}, Storage: st, StateDir: t.TempDir(), Epoch: 7, Observer: obs, RestartBackoff: time.Millisecond})
	if !errors.Is(err, engine.ErrSuperseded) {
		t.Fatalf("zombie worker: want ErrSuperseded, got %v", err)
	}
	if obs.n.Load() != 1 || obs.restarting.Load() {
		t.Fatalf("zombie task failed %d times (restarting %v), want once and not restarted", obs.n.Load(), obs.restarting.Load())
	}
}

// TestRetentionKeepsNewestCheckpoints: after a run with many checkpoints,
// storage holds only the newest Retained of them.
func TestRetentionKeepsNewestCheckpoints(t *testing.T) {
	st := checkpoint.NewMemory(checkpoint.MemoryOptions{})
	// Long enough for many retention calls (at most one per 10 ms here):
	// at 200,000 records the run took 30 ms, and a task that ended just
	// before its fourth call left half its checkpoints.
	plan := countJob(t, 2_000_000, 10, 1, nil, stream.DiscardSink[update]())
	err := engine.Run(t.Context(), plan, engine.Config{
		Tasks: []int{0}, Storage: st, StateDir: t.TempDir(), Retained: 2,
		Checkpoint: checkpoint.Config{Interval: time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	ids, highest, err := checkpoint.ListCheckpoints(t.Context(), st, "count", 0)
	if err != nil {
		t.Fatal(err)
	}
	if highest < 3 {
		t.Skipf("only %d checkpoints ran: too few to see retention", highest)
	}
	// Retention runs behind the checkpoints (requests coalesce while it
	// works, and the run after the last checkpoint may be cut short when the
	// task ends), so a few more than Retained may remain; the old ones must
	// be gone and the newest kept.
	t.Logf("%d checkpoints taken, %v left", highest, ids)
	if ids[0] <= highest/2 || ids[len(ids)-1] != highest || len(ids) < 2 {
		t.Fatalf("checkpoints left %v of %d: retention did not delete the old ones or lost a new one", ids, highest)
	}
}

type drainAfter struct {
	engine.NopObserver
	n     atomic.Int64
	after int64
	once  sync.Once
	drain chan struct{}
}

func (d *drainAfter) CheckpointCompleted(string, int, checkpoint.Manifest) {
	if d.n.Add(1) == d.after {
		d.once.Do(func() { close(d.drain) })
	}
}

// TestDrainTakesFinalCheckpoint: draining an unbounded job stops its source,
// takes a final checkpoint and commits it: the committed output covers
// exactly the input up to the final checkpoint's position.
func TestDrainTakesFinalCheckpoint(t *testing.T) {
	st := checkpoint.NewMemory(checkpoint.MemoryOptions{})
	store := newTxnStore[update]()
	var processed atomic.Int64
	seen := func(int64) error { processed.Add(1); return nil }
	plan := countJob(t, 1<<40, 10, 1, seen, store.sink())
	obs := &drainAfter{after: 3, drain: make(chan struct{})}
	err := engine.Run(t.Context(), plan, engine.Config{
		Tasks: []int{0}, Storage: st, StateDir: t.TempDir(), Observer: obs, Drain: obs.drain,
		Checkpoint: checkpoint.Config{Interval: 5 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	ids, _, err := checkpoint.ListCheckpoints(t.Context(), st, "count", 0)
	if err != nil || len(ids) == 0 {
		t.Fatalf("no checkpoint after drain: %v", err)
	}
	m, err := checkpoint.ReadManifest(t.Context(), st, "count", 0, ids[len(ids)-1])
	if err != nil {
		t.Fatal(err)
	}
	var pos int64 = -1
	for _, a := range m.Operators {
		for _, p := range a.Sources {
			pos = p.Offset
		}
	}
	if pos <= 0 {
		t.Fatalf("final checkpoint %d has no source position", m.Checkpoint)
	}
	t.Logf("drained after checkpoint %d at offset %d, %d records processed", m.Checkpoint, pos, processed.Load())
	// The final checkpoint covers everything the job read: nothing processed
	// is left uncommitted.
	if processed.Load() != pos {
		t.Fatalf("processed %d records, final checkpoint at %d: the drain did not checkpoint all it read", processed.Load(), pos)
	}
	checkExactlyOnce(t, store.visible(), pos, 10, 1)
}
