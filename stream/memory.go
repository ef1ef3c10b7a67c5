package stream

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
)

// pollSize is how many records the in-memory sources return per poll.
const pollSize = 1024

// GeneratorSource is a bounded source of n records per task: record i of
// task p is fn(p, i). Its position is the index of the next record, so a
// restored task continues exactly where its checkpoint was taken.
func GeneratorSource[T any](n int64, fn func(task int, i int64) T) SourceFactory[T] {
	return func(_ context.Context, info engine.TaskInfo, restored []checkpoint.SourcePosition) (engine.SourceReader[T], error) {
		g := &generator[T]{name: info.Operator, task: info.Task, n: n, fn: fn}
		for _, p := range restored {
			if p.Partition != int32(info.Task) {
				return nil, fmt.Errorf("source %s: checkpoint has partition %d, task is %d", info.Operator, p.Partition, info.Task)
			}
			g.next = p.Offset
		}
		return g, nil
	}
}

// SliceSource is a bounded source that gives task p the records parts[p].
func SliceSource[T any](parts [][]T) SourceFactory[T] {
	gen := func(task int, i int64) T { return parts[task][i] }
	return func(ctx context.Context, info engine.TaskInfo, restored []checkpoint.SourcePosition) (engine.SourceReader[T], error) {
		if info.Task >= len(parts) {
			return nil, fmt.Errorf("source %s: no partition for task %d (%d partitions)", info.Operator, info.Task, len(parts))
		}
		return GeneratorSource(int64(len(parts[info.Task])), gen)(ctx, info, restored)
	}
}

type generator[T any] struct {
	name string
	task int
	n    int64
	next int64
	fn   func(int, int64) T
}

func (g *generator[T]) Poll(_ context.Context, b *engine.Batch[T]) error {
	if g.next >= g.n {
		return engine.ErrEndOfInput
	}
	end := min(g.next+pollSize, g.n)
	for ; g.next < end; g.next++ {
		b.Add(g.fn(g.task, g.next), engine.Position{Source: g.name, Partition: int32(g.task), Offset: g.next})
	}
	return nil
}

func (g *generator[T]) Positions() []checkpoint.SourcePosition {
	return []checkpoint.SourcePosition{{Source: g.name, Partition: int32(g.task), Offset: g.next}}
}

func (g *generator[T]) Close() error { return nil }

// DiscardSink drops every record; for benchmarks and jobs run for their
// side effects.
func DiscardSink[T any]() SinkFactory[T] {
	return func(context.Context, engine.TaskInfo, []checkpoint.Committable) (engine.SinkWriter[T], error) {
		return discardWriter[T]{}, nil
	}
}

type discardWriter[T any] struct{}

func (discardWriter[T]) Write(context.Context, T) error { return nil }
func (discardWriter[T]) PreCommit(context.Context, checkpoint.ID) ([]checkpoint.Committable, error) {
	return nil, nil
}
func (discardWriter[T]) Commit(context.Context, checkpoint.ID) error { return nil }
func (discardWriter[T]) Close() error                                { return nil }

// Collected is an in-memory sink for tests: it keeps the records of each
// task that a completed checkpoint committed, in the order written, as a
// reader of a Kafka topic read_committed would see them.
type Collected[T any] struct {
	mu  sync.Mutex
	out []T
}

// Collect returns an empty Collected; Sink(s, name, c.Sink()) fills it.
func Collect[T any]() *Collected[T] { return &Collected[T]{} }

// Sink is the sink that fills c.
func (c *Collected[T]) Sink() SinkFactory[T] {
	return func(context.Context, engine.TaskInfo, []checkpoint.Committable) (engine.SinkWriter[T], error) {
		return &collectWriter[T]{c: c}, nil
	}
}

// Records are the records committed so far.
func (c *Collected[T]) Records() []T {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.out)
}

type collectWriter[T any] struct {
	c       *Collected[T]
	open    []T // written since the last barrier
	pending []pendingRecords[T]
}

type pendingRecords[T any] struct {
	id   checkpoint.ID
	recs []T
}

func (w *collectWriter[T]) Write(_ context.Context, v T) error {
	w.open = append(w.open, v)
	return nil
}

func (w *collectWriter[T]) PreCommit(_ context.Context, id checkpoint.ID) ([]checkpoint.Committable, error) {
	w.pending = append(w.pending, pendingRecords[T]{id: id, recs: w.open})
	w.open = nil
	return nil, nil
}

func (w *collectWriter[T]) Commit(_ context.Context, id checkpoint.ID) error {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	n := 0
	for _, p := range w.pending {
		if p.id > id {
			break
		}
		w.c.out = append(w.c.out, p.recs...)
		n++
	}
	w.pending = w.pending[n:]
	return nil
}

func (w *collectWriter[T]) Close() error { return nil }

// Types of sources and sinks of your own (Source, Sink), and of the plan.
type (
	// SourceFactory opens a task's reader of a source.
	SourceFactory[T any] = engine.SourceFactory[T]
	// SourceReader reads a task's records in batches.
	SourceReader[T any] = engine.SourceReader[T]
	// Batch is what a SourceReader's Poll fills.
	Batch[T any] = engine.Batch[T]
	// TaskInfo names the task a factory opens for.
	TaskInfo = engine.TaskInfo
	// SinkOpener opens a task's writer of a sink.
	SinkOpener[T any] = engine.SinkOpener[T]
	// SinkFactory is a SinkOpener of a function.
	SinkFactory[T any] = engine.SinkFactory[T]
	// SinkWriter writes a task's records, in the two phases of its
	// checkpoints.
	SinkWriter[T any] = engine.SinkWriter[T]
	// Plan is a job's graph, built and checked.
	Plan = engine.Plan
)

// ErrEndOfInput is what a bounded source's Poll returns once it has no
// more records.
var ErrEndOfInput = engine.ErrEndOfInput

// LocalOptions say how RunLocal runs a job.
type LocalOptions struct {
	// Tasks is how many tasks run, 0 to Tasks-1; default 1.
	Tasks int
	// Interval is the checkpoint interval; default 10ms.
	Interval time.Duration
	// StateDir is where the tasks' state lives; default a temporary
	// directory, removed when RunLocal returns.
	StateDir string
}

// RunLocal builds job and runs it in process until its sources end, with
// its checkpoints in memory: a test of a job's graph over slices
// (SliceSource, Collect), with the checkpoints, barriers and two-phase
// commits it runs with under a worker. It returns Build's error, or the
// first task's that failed for good.
func RunLocal(ctx context.Context, job *Job, o LocalOptions) error {
	plan, err := job.Build()
	if err != nil {
		return err
	}
	if o.Tasks <= 0 {
		o.Tasks = 1
	}
	if o.Interval <= 0 {
		o.Interval = 10 * time.Millisecond
	}
	if o.StateDir == "" {
		dir, err := os.MkdirTemp("", "weir-local-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		o.StateDir = dir
	}
	cfg := engine.Config{
		Storage:    checkpoint.NewMemory(checkpoint.MemoryOptions{}),
		Checkpoint: checkpoint.Config{Interval: o.Interval},
		StateDir:   o.StateDir,
	}
	for t := range o.Tasks {
		cfg.Tasks = append(cfg.Tasks, t)
	}
	return engine.Run(ctx, plan, cfg)
}
