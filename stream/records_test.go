package stream_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/stream"
)

// scored is a record keyed by a float, which JSON cannot encode when it is
// infinite or NaN.
type scored struct {
	Score float64
	ID    string
}

// runFailing runs job's task 0 once, without a restart: a bad record
// fails every attempt alike, and the test wants its error.
func runFailing(t *testing.T, job *stream.Job) error {
	t.Helper()
	plan, err := job.Build()
	if err != nil {
		t.Fatal(err)
	}
	return engine.Run(context.Background(), plan, engine.Config{Tasks: []int{0}, Storage: checkpoint.NewMemory(checkpoint.MemoryOptions{}),
		StateDir: t.TempDir(), Checkpoint: checkpoint.Config{Interval: 10 * time.Millisecond}, MaxRestarts: 1, RestartBackoff: time.Millisecond})
}

// TestKeysThatFailToEncodeFailTheRecord: a key codec whose encoding fails
// (JSON of +Inf, -Inf) fails the record, naming it. JSON's Append writes
// "null" for them: keyed by it, +Inf and -Inf shared one state, nothing
// said. Keyed operators, windows and two-input operators alike.
func TestKeysThatFailToEncodeFailTheRecord(t *testing.T) {
	score := func(r scored) float64 { return r.Score }
	for _, tc := range []struct {
		name string
		job  func(keyed, other stream.KeyedStream[float64, scored]) stream.Stream[string]
	}{
		{"process", func(keyed, _ stream.KeyedStream[float64, scored]) stream.Stream[string] {
			return stream.Process(keyed, "count", func(s *stream.Setup) (stream.Processor[float64, scored, string], error) {
				n, err := stream.ValueState(s, "n", state.Int64())
				return stream.Processor[float64, scored, string]{Process: func(ctx *stream.Context[float64, string], r scored) error {
					c, _, err := n.Get()
					if err == nil {
						err = n.Set(c + 1)
					}
					return err
				}}, err
			})
		}},
		{"window", func(keyed, _ stream.KeyedStream[float64, scored]) stream.Stream[string] {
			return stream.Aggregate(keyed, "windows", stream.Tumbling(time.Second), stream.WindowOptions{}, state.Int64(),
				func(n int64, _ scored) int64 { return n + 1 }, func(a, b int64) int64 { return a + b },
				func(float64, stream.Window, int64) (string, error) { return "", nil }).Results
		}},
		{"join", func(keyed, other stream.KeyedStream[float64, scored]) stream.Stream[string] {
			return stream.IntervalJoin(keyed, other, "join", -time.Second, time.Second, state.JSON[scored](), state.JSON[scored](),
				func(float64, scored, scored) (string, error) { return "", nil })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := stream.NewJob("keys")
			in := stream.Source(job, "in", stream.SliceSource([][]scored{{{7, "a"}, {math.Inf(1), "b"}, {math.Inf(-1), "c"}}}))
			keyed := stream.KeyByPartitioned(in, "by-score", score, state.JSON[float64]())
			other := stream.KeyByPartitioned(stream.Source(job, "other", stream.SliceSource([][]scored{{{7, "x"}}})), "by-other", score, state.JSON[float64]())
			stream.Sink(tc.job(keyed, other), "out", stream.Collect[string]().Sink())
			err := runFailing(t, job)
			var re *engine.RecordError
			if !errors.As(err, &re) || !strings.Contains(err.Error(), "encode the record's key") || !strings.Contains(err.Error(), "+Inf") ||
				re.Position.Offset != 1 {
				t.Fatalf("run: %v; want the record at offset 1 (+Inf) failed, its key unencodable", err)
			}
		})
	}
}

// TestTimestampPanicFailsTheTask: a watermark strategy's Timestamp that
// panics fails the task with the record's error, as any other function of
// the job does; it took the whole process down.
func TestTimestampPanicFailsTheTask(t *testing.T) {
	job := stream.NewJob("stamps")
	in := stream.SourceWithWatermarks(job, "in", stream.SliceSource([][]scored{{{1, "a"}, {2, "b"}}}), stream.Watermarks[scored]{
		Timestamp: func(r scored, _ stream.Position) time.Time {
			if r.ID == "b" {
				panic("no time field")
			}
			return time.UnixMilli(int64(r.Score))
		},
	})
	stream.Sink(in, "out", stream.Collect[scored]().Sink())
	err := runFailing(t, job)
	var re *engine.RecordError
	if !errors.As(err, &re) || !errors.Is(err, engine.ErrPanic) || !strings.Contains(err.Error(), "no time field") || re.Position.Offset != 1 {
		t.Fatalf("run: %v; want the record at offset 1 failed with the panic", err)
	}
}
