package engine_test

import (
	"context"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/stream"
)

// carriedReader is a bounded reader whose split carries its watermark, as
// a repartition topic's does: poll k returns records with timestamps
// 100k..100k+99 and then, as if a marker followed them, moves the split's
// watermark to the last of them.
type carriedReader struct {
	polls, next int
	wm          int64
}

func (r *carriedReader) Poll(_ context.Context, b *engine.Batch[int64]) error {
	if r.next == r.polls {
		return engine.ErrEndOfInput
	}
	for i := range 100 {
		ts := int64(r.next*100 + i)
		b.Add(ts, engine.Position{Source: "in", Partition: 0, Offset: ts, Timestamp: ts})
	}
	r.next++
	r.wm = int64(r.next*100 - 1)
	return nil
}

func (r *carriedReader) SplitWatermark(string, int32) engine.Watermark {
	if r.next == 0 {
		return engine.Watermark{Millis: math.MinInt64}
	}
	return engine.Watermark{Millis: r.wm}
}

func (r *carriedReader) Positions() []checkpoint.SourcePosition {
	return []checkpoint.SourcePosition{{Source: "in", Partition: 0, Offset: int64(r.next * 100)}}
}

func (r *carriedReader) Close() error { return nil }

// watermarkSink records the watermarks its writer takes, and counts the
// records whose event time (WriteAt) is not their value.
type watermarkSink struct {
	mu       sync.Mutex
	wms      []engine.Watermark
	records  int
	mistimed int
}

func (s *watermarkSink) WriteAt(_ context.Context, v int64, ts int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records++
	if ts != v {
		s.mistimed++
	}
	return nil
}

func (s *watermarkSink) Write(context.Context, int64) error { return nil }
func (s *watermarkSink) PreCommit(context.Context, checkpoint.ID) ([]checkpoint.Committable, error) {
	return nil, nil
}
func (s *watermarkSink) Commit(context.Context, checkpoint.ID) error { return nil }
func (s *watermarkSink) Close() error                                { return nil }
func (s *watermarkSink) Watermark(w engine.Watermark) {
	s.mu.Lock()
	s.wms = append(s.wms, w)
	s.mu.Unlock()
}

// TestCarriedWatermarks: a source whose splits carry their watermarks
// sends each after the records it polled with it, never before them (no
// record is late), and a sink whose writer takes watermarks gets them all,
// in order, ending with the end of input, and each record's event time.
func TestCarriedWatermarks(t *testing.T) {
	const polls = 10
	job := stream.NewJob("carried")
	src := stream.Source(job, "in", func(context.Context, engine.TaskInfo, []checkpoint.SourcePosition) (engine.SourceReader[int64], error) {
		return &carriedReader{polls: polls}, nil
	})
	var mu sync.Mutex
	late, seen := 0, int64(math.MinInt64)
	keyed := stream.KeyByPartitioned(src, "by-key", func(v int64) int64 { return v % 3 }, state.Int64())
	out := stream.Process(keyed, "check", func(*stream.Setup) (stream.Processor[int64, int64, int64], error) {
		return stream.Processor[int64, int64, int64]{Process: func(ctx *stream.Context[int64, int64], v int64) error {
			mu.Lock()
			defer mu.Unlock()
			if wm := ctx.Watermark(); !wm.IsZero() {
				if v <= wm.UnixMilli() {
					late++
				}
				seen = max(seen, wm.UnixMilli())
			}
			return ctx.Emit(v)
		}}, nil
	})
	ws := &watermarkSink{}
	stream.Sink(out, "out", engine.SinkFactory[int64](func(context.Context, engine.TaskInfo, []checkpoint.Committable) (engine.SinkWriter[int64], error) {
		return ws, nil
	}))
	plan, err := job.Build()
	if err != nil {
		t.Fatal(err)
	}
	cfg := engine.Config{Tasks: []int{0}, Storage: checkpoint.NewMemory(checkpoint.MemoryOptions{}), StateDir: t.TempDir(),
		Checkpoint: checkpoint.Config{Interval: time.Millisecond}}
	if err := engine.Run(t.Context(), plan, cfg); err != nil {
		t.Fatal(err)
	}
	if late != 0 {
		t.Errorf("%d records late: a carried watermark went ahead of the records polled with it", late)
	}
	if ws.records != polls*100 || ws.mistimed != 0 {
		t.Errorf("the sink wrote %d records at their event time, %d at another, want %d", ws.records-ws.mistimed, ws.mistimed, polls*100)
	}
	if want := int64((polls-1)*100 - 1); seen != want {
		t.Errorf("the last watermark records met was %d, want %d", seen, want)
	}
	var want []engine.Watermark
	for k := 1; k <= polls; k++ {
		want = append(want, engine.Watermark{Millis: int64(k*100 - 1)})
	}
	want = append(want, engine.Watermark{Millis: math.MaxInt64})
	if len(ws.wms) != len(want) {
		t.Fatalf("the sink took watermarks %v, want %v", ws.wms, want)
	}
	for i := range want {
		if ws.wms[i] != want[i] {
			t.Fatalf("the sink took watermarks %v, want %v", ws.wms, want)
		}
	}
}

// TestCarriedWatermarksRefuseStrategy: a strategy would derive watermarks
// over those the splits carry; the task refuses to build.
func TestCarriedWatermarksRefuseStrategy(t *testing.T) {
	job := stream.NewJob("carried")
	src := stream.SourceWithWatermarks(job, "in", func(context.Context, engine.TaskInfo, []checkpoint.SourcePosition) (engine.SourceReader[int64], error) {
		return &carriedReader{polls: 1}, nil
	}, stream.Watermarks[int64]{OutOfOrderness: time.Second})
	stream.Sink(src, "out", stream.DiscardSink[int64]())
	plan, err := job.Build()
	if err != nil {
		t.Fatal(err)
	}
	cfg := engine.Config{Tasks: []int{0}, Storage: checkpoint.NewMemory(checkpoint.MemoryOptions{}), StateDir: t.TempDir(), MaxRestarts: 1}
	err = engine.Run(t.Context(), plan, cfg)
	if err == nil || !strings.Contains(err.Error(), "carry their watermarks") {
		t.Fatalf("run: %v, want the strategy refused", err)
	}
}
