package stream

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/runtime"
)

// pollSize is how many records the in-memory sources return per poll.
const pollSize = 1024

// GeneratorSource is a bounded source of n records per task: record i of
// task p is fn(p, i). Its position is the index of the next record, so a
// restored task continues exactly where its checkpoint was taken.
func GeneratorSource[T any](n int64, fn func(task int, i int64) T) runtime.SourceFactory[T] {
	return func(_ context.Context, info runtime.TaskInfo, restored []checkpoint.SourcePosition) (runtime.SourceReader[T], error) {
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
func SliceSource[T any](parts [][]T) runtime.SourceFactory[T] {
	gen := func(task int, i int64) T { return parts[task][i] }
	return func(ctx context.Context, info runtime.TaskInfo, restored []checkpoint.SourcePosition) (runtime.SourceReader[T], error) {
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

func (g *generator[T]) Poll(_ context.Context, b *runtime.Batch[T]) error {
	if g.next >= g.n {
		return runtime.ErrEndOfInput
	}
	end := min(g.next+pollSize, g.n)
	for ; g.next < end; g.next++ {
		b.Add(g.fn(g.task, g.next), runtime.Position{Source: g.name, Partition: int32(g.task), Offset: g.next})
	}
	return nil
}

func (g *generator[T]) Positions() []checkpoint.SourcePosition {
	return []checkpoint.SourcePosition{{Source: g.name, Partition: int32(g.task), Offset: g.next}}
}

func (g *generator[T]) Close() error { return nil }

// DiscardSink drops every record; for benchmarks and jobs run for their
// side effects.
func DiscardSink[T any]() runtime.SinkFactory[T] {
	return func(context.Context, runtime.TaskInfo, []checkpoint.Committable) (runtime.SinkWriter[T], error) {
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
func (c *Collected[T]) Sink() runtime.SinkFactory[T] {
	return func(context.Context, runtime.TaskInfo, []checkpoint.Committable) (runtime.SinkWriter[T], error) {
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
