package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/internal/partition"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/stream"
)

// firstDigit puts a key in the partition its first byte, a digit, names:
// "1-x" in 1. The tests choose keys by it instead of by a hash.
type firstDigit struct{}

func (firstDigit) Partition(key []byte, n int) int { return int(key[0]-'0') % n }
func (firstDigit) String() string                  { return "first-digit" }

// sumSink adds up the counts its tasks write.
type sumSink struct{ n atomic.Int64 }

func (s *sumSink) factory() engine.SinkFactory[int64] {
	return func(context.Context, engine.TaskInfo, []checkpoint.Committable) (engine.SinkWriter[int64], error) {
		return s, nil
	}
}

func (s *sumSink) Write(_ context.Context, n int64) error { s.n.Add(n); return nil }
func (s *sumSink) PreCommit(context.Context, checkpoint.ID) ([]checkpoint.Committable, error) {
	return nil, nil
}
func (s *sumSink) Commit(context.Context, checkpoint.ID) error { return nil }
func (s *sumSink) Close() error                                { return nil }

// aside is a record BadRecords took.
type aside struct {
	info engine.TaskInfo
	pos  engine.Position
	key  string
	err  *engine.MisKeyedError
}

// setAside is a BadRecords that keeps what it is given and returns fail.
type setAside struct {
	mu   sync.Mutex
	got  []aside
	fail func(err *engine.MisKeyedError) error
}

func (s *setAside) MisKeyed(_ context.Context, info engine.TaskInfo, pos engine.Position, key []byte, err *engine.MisKeyedError) error {
	s.mu.Lock()
	s.got = append(s.got, aside{info: info, pos: pos, key: string(key), err: err})
	s.mu.Unlock()
	if s.fail != nil {
		return s.fail(err)
	}
	return nil
}

// keyedKinds build a job of one kind of keyed operator over the records of
// parts (task p reads parts[p]; a record is its key) that counts what it
// processes into the sink: each builds with keyBy, KeyBy or LocalKeyBy.
// The co-processing kind reads parts on its second input ("key-b") and
// two in-task records per task on its first. The operator is "count".
var keyedKinds = []struct {
	name     string
	prefetch bool // the backend prefetches (the batch path)
	build    func(job *stream.Job, parts [][]string, keyBy keyByFunc) stream.Stream[int64]
}{
	{"process", true, buildProcess},
	{"process-unbatched", false, buildProcess},
	{"coprocess", true, func(job *stream.Job, parts [][]string, keyBy keyByFunc) stream.Stream[int64] {
		first := make([][]string, len(parts))
		for p := range first {
			first[p] = []string{fmt.Sprintf("%d-a", p), fmt.Sprintf("%d-b", p)}
		}
		a := keyBy(stream.Source(job, "a", stream.SliceSource(first)), "key-a", func(s string) string { return s }, state.String())
		b := keyBy(stream.Source(job, "in", stream.SliceSource(parts)), "key-b", func(s string) string { return s }, state.String())
		one := func(ctx *stream.Context[string, int64], _ string) error { return ctx.Emit(1) }
		out := stream.CoProcess(a, b, "count", func(*stream.Setup) (stream.CoProcessor[string, string, string, int64], error) {
			return stream.CoProcessor[string, string, string, int64]{Process1: one, Process2: one}, nil
		})
		return out
	}},
	{"window", true, func(job *stream.Job, parts [][]string, keyBy keyByFunc) stream.Stream[int64] {
		src := stream.SourceWithWatermarks(job, "in", stream.SliceSource(parts), stream.Watermarks[string]{
			Timestamp: func(string, stream.Position) time.Time { return time.UnixMilli(1000) },
		})
		w := stream.Aggregate(keyBy(src, "by-key", func(s string) string { return s }, state.String()), "count",
			stream.Tumbling(time.Minute), stream.WindowOptions{}, state.Int64(),
			func(n int64, _ string) int64 { return n + 1 },
			func(a, b int64) int64 { return a + b },
			func(_ string, _ stream.Window, n int64) (int64, error) { return n, nil })
		return w.Results
	}},
}

type keyByFunc func(s stream.Stream[string], name string, keyFn func(string) string, codec state.Codec[string]) stream.KeyedStream[string, string]

func buildProcess(job *stream.Job, parts [][]string, keyBy keyByFunc) stream.Stream[int64] {
	keyed := keyBy(stream.Source(job, "in", stream.SliceSource(parts)), "by-key", func(s string) string { return s }, state.String())
	return stream.Process(keyed, "count", func(s *stream.Setup) (stream.Processor[string, string, int64], error) {
		seen, err := stream.ValueState(s, "seen", state.Int64())
		return stream.Processor[string, string, int64]{
			Process: func(ctx *stream.Context[string, int64], _ string) error {
				n, _, err := seen.Get()
				if err != nil {
					return err
				}
				if err := seen.Set(n + 1); err != nil {
					return err
				}
				return ctx.Emit(1)
			},
		}, err
	})
}

// keyedInputs are two tasks' records; wrongAt is the record of task 0,
// key "1-stray", that firstDigit puts in task 1.
func keyedInputs(wrongAt int) [][]string {
	var parts [][]string
	for p := range 2 {
		var recs []string
		for i := range 300 {
			recs = append(recs, fmt.Sprintf("%d-%d", p, i%7))
		}
		parts = append(parts, recs)
	}
	if wrongAt >= 0 {
		parts[0][wrongAt] = "1-stray"
	}
	return parts
}

// runKeyed runs kind's job over parts on both tasks with cfg's check
// settings, and returns what the sink counted (less the co-processing
// kind's first input) and Run's error.
func runKeyed(t *testing.T, kindIdx int, parts [][]string, keyBy keyByFunc, cfg engine.Config) (int64, error) {
	t.Helper()
	kind := keyedKinds[kindIdx]
	job := stream.NewJob("keys")
	sink := &sumSink{}
	stream.Sink(kind.build(job, parts, keyBy), "out", sink.factory())
	plan, err := job.Build()
	if err != nil {
		t.Fatal(err)
	}
	backend := state.NewMemory(state.MemoryOptions{})
	if !kind.prefetch {
		backend = withoutPrefetch(backend)
	}
	cfg.Tasks = []int{0, 1}
	cfg.Storage = checkpoint.NewMemory(checkpoint.MemoryOptions{})
	cfg.StateDir = t.TempDir()
	cfg.StateBackend = backend
	cfg.RestartBackoff = time.Millisecond
	err = engine.Run(t.Context(), plan, cfg)
	n := sink.n.Load()
	if kind.name == "coprocess" {
		n -= 4
	}
	return n, err
}

// TestKeyedCheck: every kind of keyed operator checks each record's key
// against the task: keys of the task pass; a key of another task fails the
// task for good, naming the record, or goes to BadRecords and the task
// goes on; a LocalKeyBy, or no partition count, is not checked.
func TestKeyedCheck(t *testing.T) {
	const wrongAt, total = 123, 600
	for ki, kind := range keyedKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Run("in-task", func(t *testing.T) {
				n, err := runKeyed(t, ki, keyedInputs(-1), stream.KeyByPartitioned, engine.Config{Partitions: 2, Partitioner: firstDigit{}})
				if err != nil || n != total {
					t.Fatalf("counted %d of %d records, err %v", n, total, err)
				}
			})
			t.Run("off-task/fail", func(t *testing.T) {
				obs := &failures{}
				n, err := runKeyed(t, ki, keyedInputs(wrongAt), stream.KeyByPartitioned,
					engine.Config{Partitions: 2, Partitioner: firstDigit{}, MaxRestarts: 5, Observer: obs})
				var mk *engine.MisKeyedError
				if !errors.As(err, &mk) || !errors.Is(err, engine.ErrMisKeyed) {
					t.Fatalf("want a MisKeyedError, got %v (counted %d)", err, n)
				}
				keyBy := "by-key"
				if kind.name == "coprocess" {
					keyBy = "key-b"
				}
				want := engine.MisKeyedError{Job: "keys", Operator: "count", KeyBy: keyBy,
					Position: engine.Position{Source: "in", Partition: 0, Offset: wrongAt},
					Key:      `"1-stray"`, KeyBytes: []byte("1-stray"), Task: 0, Owner: 1, Partitions: 2, Partitioner: "first-digit"}
				want.Position.Timestamp = mk.Position.Timestamp // the window's source sets it
				if fmt.Sprint(*mk) != fmt.Sprint(want) {
					t.Errorf("error\n%+v, want\n%+v", *mk, want)
				}
				for _, s := range []string{"record in 0@123", `key "1-stray" (bytes "1-stray") belongs to task 1, not task 0`, "KeyByPartitioned " + keyBy, "stream.KeyBy,", "stream.LocalKeyBy", "--partitioner"} {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error does not say %q: %v", s, err)
					}
				}
				if n, again := obs.n.Load(), obs.restarting.Load(); n != 1 || again {
					t.Errorf("task failed %d times (restarting: %v), want once for good: restarting reads the record again", n, again)
				}
			})
			t.Run("off-task/set-aside", func(t *testing.T) {
				bad := &setAside{}
				n, err := runKeyed(t, ki, keyedInputs(wrongAt), stream.KeyByPartitioned,
					engine.Config{Partitions: 2, Partitioner: firstDigit{}, BadRecords: bad})
				if err != nil || n != total-1 {
					t.Fatalf("counted %d records, want all %d but the one set aside; err %v", n, total-1, err)
				}
				if len(bad.got) != 1 {
					t.Fatalf("BadRecords took %d records, want 1: %+v", len(bad.got), bad.got)
				}
				a := bad.got[0]
				if a.info.Task != 0 || a.info.Operator != "count" || a.info.Job != "keys" || a.pos.Offset != wrongAt || a.pos.Source != "in" ||
					a.key != "1-stray" || a.err.Owner != 1 || a.err.Position != a.pos {
					t.Errorf("BadRecords got %+v", a)
				}
			})
			t.Run("off-task/set-aside-fails", func(t *testing.T) {
				bad := &setAside{fail: func(err *engine.MisKeyedError) error {
					return fmt.Errorf("%w; it is in an internal topic: a bug", err)
				}}
				obs := &failures{}
				_, err := runKeyed(t, ki, keyedInputs(wrongAt), stream.KeyByPartitioned,
					engine.Config{Partitions: 2, Partitioner: firstDigit{}, BadRecords: bad, MaxRestarts: 5, Observer: obs})
				if !errors.Is(err, engine.ErrMisKeyed) || !strings.Contains(err.Error(), "a bug") {
					t.Fatalf("want BadRecords' error, got %v", err)
				}
				if n := obs.n.Load(); n != 1 {
					t.Errorf("task failed %d times, want once for good", n)
				}
			})
			t.Run("local", func(t *testing.T) {
				bad := &setAside{}
				n, err := runKeyed(t, ki, keyedInputs(wrongAt), stream.LocalKeyBy,
					engine.Config{Partitions: 2, Partitioner: firstDigit{}, BadRecords: bad})
				if err != nil || n != total || len(bad.got) != 0 {
					t.Fatalf("a LocalKeyBy counted %d of %d records, set aside %d, err %v", n, total, len(bad.got), err)
				}
			})
			t.Run("unchecked", func(t *testing.T) {
				n, err := runKeyed(t, ki, keyedInputs(wrongAt), stream.KeyByPartitioned, engine.Config{Partitioner: firstDigit{}})
				if err != nil || n != total {
					t.Fatalf("without Partitions: counted %d of %d records, err %v", n, total, err)
				}
			})
		})
	}
}

// TestKeyedCheckDefaultPartitioner: Kafka's murmur2 is the default.
func TestKeyedCheckDefaultPartitioner(t *testing.T) {
	// A key murmur2 puts in partition 1 of 2, in task 0.
	var stray string
	for i := 0; stray == ""; i++ {
		if k := fmt.Sprintf("1-k%d", i); partition.Murmur2.Partition([]byte(k), 2) == 1 {
			stray = k
		}
	}
	parts := [][]string{{stray}, {}}
	_, err := runKeyed(t, 0, parts, stream.KeyByPartitioned, engine.Config{Partitions: 2})
	var mk *engine.MisKeyedError
	if !errors.As(err, &mk) || mk.Partitioner != "murmur2" || mk.Owner != 1 {
		t.Fatalf("by default, want murmur2 to put %q in task 1: %v", stray, err)
	}
}

// TestPartitionsBoundTasks: a task beyond the input's partitions has no
// key of its own; it is refused.
func TestPartitionsBoundTasks(t *testing.T) {
	plan := countJob(t, 1, 1, 1, nil, stream.DiscardSink[update]())
	err := engine.Run(t.Context(), plan, engine.Config{Tasks: []int{0, 2}, Partitions: 2, Storage: checkpoint.NewMemory(checkpoint.MemoryOptions{})})
	if err == nil || !strings.Contains(err.Error(), "tasks: 2 has no partition: the input has 2") {
		t.Fatalf("want task 2 refused, got %v", err)
	}
	r, err := engine.NewRunner(t.Context(), plan, engine.Config{Partitions: 2, Storage: checkpoint.NewMemory(checkpoint.MemoryOptions{}), StateDir: t.TempDir()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(2, 1); err == nil || !strings.Contains(err.Error(), "no partition") {
		t.Fatalf("Start(2) of 2 partitions: %v", err)
	}
}

// TestKeyedCheckWindowResult: a window's result is no record of the input,
// so a mis-keyed one (keyed by a key of another task: a bug of the job's)
// must not go to BadRecords under the position of the record the task
// processed before the window fired, a good record that a dead letter
// would then have the operator produce again. It fails the task, saying
// which operator emitted it. Both ways a window fires: its end reached by
// the watermark (a timer), and a late record within the allowed lateness
// (at once).
func TestKeyedCheckWindowResult(t *testing.T) {
	for _, late := range []bool{false, true} {
		t.Run(fmt.Sprintf("late=%v", late), func(t *testing.T) {
			// One record in the window [0, 1m), then a poll's worth past
			// it, whose watermark fires it; the last record, in the
			// next poll, is late for it.
			in := make([]string, 1025)
			for i := range in {
				in[i] = "0-" + strconv.Itoa(i)
			}
			at := func(i int64) int64 {
				switch i {
				case 0:
					return 1_000
				case 1024:
					return 2_000
				}
				return 120_000
			}
			job := stream.NewJob("keys")
			src := stream.SourceWithWatermarks(job, "in", stream.SliceSource([][]string{in, {}}), stream.Watermarks[string]{
				Timestamp: func(_ string, p stream.Position) time.Time { return time.UnixMilli(at(p.Offset)) },
			})
			byKey := stream.KeyByPartitioned(src, "by-key", func(string) string { return "0" }, state.String())
			opts := stream.WindowOptions{}
			if late {
				opts.AllowedLateness = 5 * time.Minute
			}
			counts := stream.Aggregate(byKey, "count", stream.Tumbling(time.Minute), opts, state.Int64(),
				func(n int64, _ string) int64 { return n + 1 },
				func(a, b int64) int64 { return a + b },
				// Keyed by a key of task 1: on the window's first firing
				// (by the watermark); or, with lateness, only when the
				// late record fires it again.
				func(k string, w stream.Window, n int64) (string, error) {
					task := n
					if late {
						task = n - 1
					}
					return fmt.Sprintf("%d-%d", task, w.Start.UnixMilli()), nil
				})
			again := stream.KeyByPartitioned(counts.Results, "by-window", func(s string) string { return s }, state.String())
			out := stream.Process(again, "sum", func(*stream.Setup) (stream.Processor[string, string, int64], error) {
				return stream.Processor[string, string, int64]{Process: func(ctx *stream.Context[string, int64], _ string) error { return ctx.Emit(1) }}, nil
			})
			stream.Sink(out, "out", (&sumSink{}).factory())
			plan, err := job.Build()
			if err != nil {
				t.Fatal(err)
			}
			bad := &setAside{}
			err = engine.Run(t.Context(), plan, engine.Config{
				Tasks: []int{0}, Partitions: 2, Partitioner: firstDigit{}, BadRecords: bad,
				Storage: checkpoint.NewMemory(checkpoint.MemoryOptions{}), StateDir: t.TempDir(),
				StateBackend: state.NewMemory(state.MemoryOptions{}), RestartBackoff: time.Millisecond,
			})
			for _, a := range bad.got {
				t.Errorf("set aside %q as the record at %v", a.key, a.pos)
			}
			var mk *engine.MisKeyedError
			if !errors.As(err, &mk) || !mk.Position.Emitted() || !strings.Contains(err.Error(), "emitted by operator count") {
				t.Fatalf("run: %v; want the task failed on a record emitted by operator count", err)
			}
		})
	}
}
