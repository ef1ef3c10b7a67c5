package engine_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
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

// twoInputJob unions (or co-processes) two numbered sources into one keyed
// count. Source b's numbers are offset so that the two inputs never share a
// number.
func twoInputJob(t testing.TB, coProcess bool, records int64, keys uint64, fail func() error, sink engine.SinkOpener[update]) *engine.Plan {
	const offset = 1 << 40
	job := stream.NewJob("two-inputs")
	a := stream.Source(job, "a", stream.GeneratorSource(records, func(_ int, i int64) int64 { return i }))
	b := stream.Source(job, "b", stream.GeneratorSource(records, func(_ int, i int64) int64 { return offset + i }))
	key := func(n int64) uint64 { return uint64(n) % keys }
	counter := func(s *stream.Setup) (func(ctx *stream.Context[uint64, update], n int64) error, error) {
		count, err := stream.ValueState(s, "count", state.Int64())
		if err != nil {
			return nil, err
		}
		sum, err := stream.ValueState(s, "sum", state.Int64())
		return func(ctx *stream.Context[uint64, update], n int64) error {
			if fail != nil {
				if err := fail(); err != nil {
					return err
				}
			}
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
		}, err
	}
	var out stream.Stream[update]
	if coProcess {
		out = stream.CoProcess(stream.KeyByPartitioned(a, "key-a", key, state.Uint64()), stream.KeyByPartitioned(b, "key-b", key, state.Uint64()), "count",
			func(s *stream.Setup) (stream.CoProcessor[uint64, int64, int64, update], error) {
				f, err := counter(s)
				return stream.CoProcessor[uint64, int64, int64, update]{Process1: f, Process2: f}, err
			})
	} else {
		merged := stream.Union("merge", a, b)
		out = stream.Process(stream.KeyByPartitioned(merged, "by-key", key, state.Uint64()), "count",
			func(s *stream.Setup) (stream.Processor[uint64, int64, update], error) {
				f, err := counter(s)
				return stream.Processor[uint64, int64, update]{Process: f}, err
			})
	}
	stream.Sink(out, "out", sink)
	plan, err := job.Build()
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

func checkTwoInputs(t *testing.T, out []update, records int64, keys uint64) {
	t.Helper()
	const offset = 1 << 40
	wantCount := map[uint64]int64{}
	wantSum := map[uint64]int64{}
	for i := range records {
		for _, n := range []int64{i, offset + i} {
			wantCount[uint64(n)%keys]++
			wantSum[uint64(n)%keys] += n
		}
	}
	have := map[uint64]map[int64]int{}
	final := map[uint64]update{}
	for _, u := range out {
		if have[u.Key] == nil {
			have[u.Key] = map[int64]int{}
		}
		have[u.Key][u.Count]++
		if u.Count > final[u.Key].Count {
			final[u.Key] = u
		}
	}
	dups, missing := 0, 0
	for k, n := range wantCount {
		for c := int64(1); c <= n; c++ {
			switch h := have[k][c]; {
			case h == 0:
				missing++
			case h > 1:
				dups += h - 1
			}
		}
		if final[k].Sum != wantSum[k] {
			t.Errorf("key %d: final sum %d, want %d", k, final[k].Sum, wantSum[k])
		}
	}
	t.Logf("updates out %d, duplicates %d, missing %d", len(out), dups, missing)
	if dups != 0 || missing != 0 {
		t.Fatalf("not exactly once: %d duplicates, %d missing", dups, missing)
	}
}

// TestTwoInputsExactlyOnceThroughFailures runs a union and a co-process
// through injected failures: barrier alignment must keep their state
// consistent with the source positions of each checkpoint.
func TestTwoInputsExactlyOnceThroughFailures(t *testing.T) {
	for _, co := range []bool{false, true} {
		t.Run(fmt.Sprintf("coprocess=%v", co), func(t *testing.T) {
			seed := time.Now().UnixNano()
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(uint64(seed), 1))
			const records, keys = 100_000, 101
			var processed atomic.Int64
			var failures atomic.Int64
			failAt := rng.Int64N(20_000) + 1
			var nextFail atomic.Int64
			nextFail.Store(failAt)
			fail := func() error {
				n := processed.Add(1)
				if failures.Load() < 5 && n == nextFail.Load() {
					failures.Add(1)
					nextFail.Store(n + rng.Int64N(40_000) + 1)
					return errors.New("injected")
				}
				return nil
			}
			store := newTxnStore[update]()
			plan := twoInputJob(t, co, records, keys, fail, store.sink())
			err := engine.Run(t.Context(), plan, engine.Config{
				Tasks:          []int{0},
				Storage:        checkpoint.NewMemory(checkpoint.MemoryOptions{}),
				Checkpoint:     checkpoint.Config{Interval: 2 * time.Millisecond},
				StateDir:       t.TempDir(),
				RestartBackoff: time.Millisecond,
				MaxRestarts:    -1,
			})
			if err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			t.Logf("failures injected: %d", failures.Load())
			checkTwoInputs(t, store.visible(), records, keys)
		})
	}
}

// TestMemoryStorageLimitFailsCheckpointNamingState: a state over the memory
// storage's limit fails the checkpoint with an error naming the operator,
// the state and its size; past the tolerable failures the task fails.
func TestMemoryStorageLimitFailsCheckpointNamingState(t *testing.T) {
	plan := countJob(t, 300_000, 300_000, 1, nil, stream.DiscardSink[update]())
	obs := &abortObserver{}
	err := engine.Run(t.Context(), plan, engine.Config{
		Tasks:       []int{0},
		Storage:     checkpoint.NewMemory(checkpoint.MemoryOptions{MaxObjectSize: 1 << 20}),
		Checkpoint:  checkpoint.Config{Interval: time.Millisecond},
		StateDir:    t.TempDir(),
		MaxRestarts: 1,
		Observer:    obs,
	})
	if err == nil {
		t.Fatal("a state over the storage limit did not fail the job")
	}
	obs.mu.Lock()
	first := obs.first
	obs.mu.Unlock()
	var tooLarge *checkpoint.ObjectTooLargeError
	if first == nil || !errors.As(first, &tooLarge) {
		t.Fatalf("checkpoint not aborted for size: %v (job: %v)", first, err)
	}
	for _, want := range []string{"count", "bytes"} {
		if !strings.Contains(first.Error(), want) {
			t.Errorf("error lacks %q: %v", want, first)
		}
	}
	t.Logf("checkpoint error: %v", first)
}

type abortObserver struct {
	engine.NopObserver
	mu    sync.Mutex
	first error
}

func (o *abortObserver) CheckpointAborted(_ string, _ int, _ checkpoint.ID, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.first == nil {
		o.first = err
	}
}

// TestUnionCommitsFinalCheckpoint: a sink fused behind a union commits the
// final checkpoint before the job ends. (The union's inputs end right after
// the final checkpoint completes; the completion must reach the union
// first.) The race it guards against was rare, so the job runs many times.
func TestUnionCommitsFinalCheckpoint(t *testing.T) {
	for i := range 200 {
		job := stream.NewJob("union-final")
		a := stream.Source(job, "a", stream.GeneratorSource(10, func(_ int, i int64) int64 { return i }))
		b := stream.Source(job, "b", stream.GeneratorSource(10, func(_ int, i int64) int64 { return 100 + i }))
		store := newTxnStore[int64]()
		stream.Sink(stream.Union("merge", a, b), "out", store.sink())
		plan, err := job.Build()
		if err != nil {
			t.Fatal(err)
		}
		if err := engine.Run(t.Context(), plan, engine.Config{Tasks: []int{0}, Storage: checkpoint.NewMemory(checkpoint.MemoryOptions{})}); err != nil {
			t.Fatal(err)
		}
		if got := len(store.visible()); got != 20 {
			t.Fatalf("run %d: %d of 20 records committed when the job ended", i, got)
		}
	}
}
