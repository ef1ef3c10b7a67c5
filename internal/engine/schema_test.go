package engine_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/stream"
)

// runOnce runs plan's task 0 on storage until its input ends, once.
func runOnce(t *testing.T, storage checkpoint.Storage, plan *engine.Plan) error {
	t.Helper()
	return engine.Run(t.Context(), plan, engine.Config{Tasks: []int{0}, Storage: storage, StateBackend: state.NewPebble(state.PebbleOptions{}),
		Checkpoint: checkpoint.Config{Interval: 5 * time.Millisecond}, StateDir: t.TempDir(), MaxRestarts: 1, RestartBackoff: time.Millisecond})
}

// schemaJob counts n records, i%10 their key, in value state "count": the
// key encoded by kc, the count by cc. It emits "key=count" per record.
func schemaJob[K any, C interface{ ~int64 | ~uint64 }](t *testing.T, n int64, key func(int64) K, kc state.Codec[K], cc state.Codec[C], out *txnStore[string]) *engine.Plan {
	t.Helper()
	return schemaJobOf(t, n, key, kc, "count", cc, out)
}

// schemaJobOf is schemaJob with the count in state name.
func schemaJobOf[K any, C interface{ ~int64 | ~uint64 }](t *testing.T, n int64, key func(int64) K, kc state.Codec[K], name string, cc state.Codec[C], out *txnStore[string]) *engine.Plan {
	t.Helper()
	job := stream.NewJob("schema")
	src := stream.Source(job, "numbers", stream.GeneratorSource(n, func(_ int, i int64) int64 { return i }))
	counts := stream.Process(stream.KeyByPartitioned(src, "by-key", key, kc), "count",
		func(s *stream.Setup) (stream.Processor[K, int64, string], error) {
			count, err := stream.ValueState(s, name, cc)
			return stream.Processor[K, int64, string]{Process: func(ctx *stream.Context[K, string], _ int64) error {
				c, _, err := count.Get()
				if err == nil {
					err = count.Set(c + 1)
				}
				if err != nil {
					return err
				}
				return ctx.Emit(fmt.Sprintf("%v=%d", ctx.Key(), c+1))
			}}, err
		})
	stream.Sink(counts, "out", out.sink())
	plan, err := job.Build()
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

// TestRestoreRefusesStateReadAnotherWay: a job restarted with another
// codec for its state, or for its key, every name kept, restored the old
// bytes: an int64 count read as a uint64 or a float, or no key found
// (counts restarting at 1). The checkpoint records what each state means,
// and the restore refuses a job that reads it another way, naming it.
func TestRestoreRefusesStateReadAnotherWay(t *testing.T) {
	byKey := func(i int64) uint64 { return uint64(i % 10) }
	first := func(t *testing.T) checkpoint.Storage {
		storage := checkpoint.NewMemory(checkpoint.MemoryOptions{})
		if err := runOnce(t, storage, schemaJob(t, 100, byKey, state.Uint64(), state.Int64(), newTxnStore[string]())); err != nil {
			t.Fatal(err)
		}
		return storage
	}
	t.Run("same", func(t *testing.T) {
		out := newTxnStore[string]()
		if err := runOnce(t, first(t), schemaJob(t, 110, byKey, state.Uint64(), state.Int64(), out)); err != nil {
			t.Fatal(err)
		}
		if got := out.visible(); len(got) != 10 || got[3] != "3=11" {
			t.Fatalf("restored with the same codecs: %q, want 10 updates, key 3's count 11", got)
		}
	})
	t.Run("undeclared in between", func(t *testing.T) {
		// The version in between counts in another state; "count" stays
		// in the backend, and what it means with it.
		storage := first(t)
		if err := runOnce(t, storage, schemaJobOf(t, 105, byKey, state.Uint64(), "tally", state.Int64(), newTxnStore[string]())); err != nil {
			t.Fatal(err)
		}
		out := newTxnStore[string]()
		err := runOnce(t, storage, schemaJob(t, 110, byKey, state.Uint64(), state.Uint64(), out))
		if !errors.Is(err, engine.ErrIncompatibleCheckpoint) || !strings.Contains(err.Error(), `state/count was "value int64", is "value uint64"`) {
			t.Fatalf("restored with another codec after a version without the state: %v (output %q); want it refused", err, out.visible())
		}
	})
	for _, tc := range []struct {
		name string
		plan func(*testing.T, *txnStore[string]) *engine.Plan
		want string
	}{
		{"value codec", func(t *testing.T, out *txnStore[string]) *engine.Plan {
			return schemaJob(t, 110, byKey, state.Uint64(), state.Uint64(), out)
		}, `state/count was "value int64", is "value uint64"`},
		{"key codec", func(t *testing.T, out *txnStore[string]) *engine.Plan {
			return schemaJob(t, 110, func(i int64) int64 { return i % 10 }, state.Int64(), state.Int64(), out)
		}, `key was "uint64", is "int64"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := newTxnStore[string]()
			err := runOnce(t, first(t), tc.plan(t, out))
			if !errors.Is(err, engine.ErrIncompatibleCheckpoint) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "operator count") {
				t.Fatalf("restored with another %s: %v (output %q); want it refused naming %s", tc.name, err, out.visible(), tc.want)
			}
		})
	}
}

// TestRestoreRefusesWindowsOfAnotherSize: a window's state is found by its
// key and start, and its timer, at its end, finds it by the size. Restored
// into 5 s windows, the 1 s windows open at the checkpoint never fired,
// their records lost without a word. The restore refuses it.
func TestRestoreRefusesWindowsOfAnotherSize(t *testing.T) {
	job := func(n int64, size time.Duration, out *txnStore[wResult]) *engine.Plan {
		j := stream.NewJob("windows")
		src := stream.SourceWithWatermarks(j, "events", stream.GeneratorSource(n, func(_ int, i int64) wEvent {
			return wEvent{Key: uint64(i % 3), TS: wBase + i*100, ID: 1 << 32}
		}), stream.Watermarks[wEvent]{Timestamp: func(e wEvent, _ stream.Position) time.Time { return time.UnixMilli(e.TS) }})
		win := stream.Aggregate(stream.KeyByPartitioned(src, "by-key", func(e wEvent) uint64 { return e.Key }, state.Uint64()), "windows",
			stream.Tumbling(size), stream.WindowOptions{}, state.Int64(), countAdd, countMerge, countResult)
		stream.Sink(win.Results, "sink", out.sink())
		plan, err := j.Build()
		if err != nil {
			t.Fatal(err)
		}
		return plan
	}
	for _, tc := range []struct {
		name string
		size time.Duration
		want string // the refusal, "" none
	}{{"same", time.Second, ""}, {"larger", 5 * time.Second, `window was "fixed 1s", is "fixed 5s"`}} {
		t.Run(tc.name, func(t *testing.T) {
			storage := checkpoint.NewMemory(checkpoint.MemoryOptions{})
			// The first run's checkpoints record the windows' size. Its
			// input ends, which fires its windows; a drained job's, left
			// open, would never fire in windows of another size.
			if err := runOnce(t, storage, job(65, time.Second, newTxnStore[wResult]())); err != nil {
				t.Fatal(err)
			}
			err := runOnce(t, storage, job(100, tc.size, newTxnStore[wResult]()))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("restored into windows of the same size: %v", err)
			case tc.want != "" && (!errors.Is(err, engine.ErrIncompatibleCheckpoint) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("restored into windows of another size: %v; want it refused naming %s", err, tc.want)
			}
		})
	}
}

// TestOperatorNamesStorageKeeps: an operator's name names its objects in
// checkpoint storage; one with a control character is refused at Build,
// not found garbled in an S3 listing later.
func TestOperatorNamesStorageKeeps(t *testing.T) {
	job := stream.NewJob("names")
	src := stream.Source(job, "numbers", stream.GeneratorSource(10, func(_ int, i int64) int64 { return i }))
	stream.Sink(stream.Map(src, "double\x01", func(i int64) (int64, error) { return 2 * i, nil }), "out", stream.Collect[int64]().Sink())
	if _, err := job.Build(); err == nil || !strings.Contains(err.Error(), "control characters") {
		t.Fatalf("Build: %v, want the operator's name refused", err)
	}
}

// TestCoProcessInputsKeyedAlike: both inputs of a two-input operator
// address one state by the key's bytes; keyed by codecs that encode a key
// otherwise, a key's records of the second input found none of the
// first's. Refused at Build.
func TestCoProcessInputsKeyedAlike(t *testing.T) {
	for _, tc := range []struct {
		name string
		kc   state.Codec[uint64]
		want string
	}{{"alike", state.Uint64(), ""}, {"otherwise", state.JSON[uint64](), "keyed by different codecs (uint64 and json)"}} {
		t.Run(tc.name, func(t *testing.T) {
			job := stream.NewJob("pairs")
			key := func(i int64) uint64 { return uint64(i) }
			a := stream.KeyByPartitioned(stream.Source(job, "a", stream.GeneratorSource(1, func(_ int, i int64) int64 { return i })), "by-a", key, state.Uint64())
			b := stream.KeyByPartitioned(stream.Source(job, "b", stream.GeneratorSource(1, func(_ int, i int64) int64 { return i })), "by-b", key, tc.kc)
			joined := stream.IntervalJoin(a, b, "join", 0, 0, state.Int64(), state.Int64(), func(_ uint64, x, _ int64) (int64, error) { return x, nil })
			stream.Sink(joined, "out", stream.Collect[int64]().Sink())
			_, err := job.Build()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Build: %v, want %q", err, tc.want)
			}
		})
	}
}
