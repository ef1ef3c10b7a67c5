package stream_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/stream"
)

// printSink prints what it wrote once the checkpoint covering it completes:
// a two-phase-commit sink in miniature.
type printSink struct{ pending, committed []string }

func (p *printSink) Write(_ context.Context, s string) error {
	p.pending = append(p.pending, s)
	return nil
}

func (p *printSink) PreCommit(context.Context, checkpoint.ID) ([]checkpoint.Committable, error) {
	p.committed = append(p.committed, p.pending...)
	p.pending = nil
	return nil, nil
}

func (p *printSink) Commit(context.Context, checkpoint.ID) error {
	for _, s := range p.committed {
		fmt.Println(s)
	}
	p.committed = nil
	return nil
}

func (p *printSink) Close() error { return nil }

// A word count: lines are split into words, keyed by word, and a keyed
// operator keeps each word's count in keyed state.
func Example() {
	job := stream.NewJob("wordcount")
	lines := stream.Source(job, "lines", stream.SliceSource([][]string{{"to be or", "not to be"}}))
	words := stream.FlatMap(lines, "split", func(line string, out *stream.Emitter[string]) error {
		for _, w := range strings.Fields(line) {
			if err := out.Emit(w); err != nil {
				return err
			}
		}
		return nil
	})
	byWord := stream.KeyBy(words, "by-word", func(w string) string { return w }, state.String(), state.String())
	counts := stream.Process(byWord, "count", func(s *stream.Setup) (stream.Processor[string, string, string], error) {
		count, err := stream.ValueState(s, "count", state.Int64())
		return stream.Processor[string, string, string]{
			Process: func(ctx *stream.Context[string, string], w string) error {
				n, _, err := count.Get()
				if err != nil {
					return err
				}
				if err := count.Set(n + 1); err != nil {
					return err
				}
				return ctx.Emit(fmt.Sprintf("%s=%d", w, n+1))
			},
		}, err
	})
	stream.Sink(counts, "print", engine.SinkFactory[string](func(context.Context, engine.TaskInfo, []checkpoint.Committable) (engine.SinkWriter[string], error) {
		return &printSink{}, nil
	}))
	plan, err := job.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	err = engine.Run(context.Background(), plan, engine.Config{
		Tasks:   []int{0},
		Storage: checkpoint.NewMemory(checkpoint.MemoryOptions{}),
	})
	if err != nil {
		fmt.Println(err)
	}
	// Output:
	// to=1
	// be=1
	// or=1
	// not=1
	// to=2
	// be=2
}

// KeyByPartitioned declares that the input is partitioned by the key. Given the
// input's partition count, every keyed operator checks each record: here
// task 0 of 2 reads a word that murmur2, Kafka's partitioner, puts in
// partition 1, and the task fails for good naming it (a worker can
// dead-letter it instead). Keyed with stream.LocalKeyBy, task 0 would
// count it, a partial count on purpose.
func ExampleKeyByPartitioned() {
	job := stream.NewJob("wordcount")
	lines := stream.Source(job, "lines", stream.SliceSource([][]string{{"to be or"}, {}}))
	words := stream.FlatMap(lines, "split", func(line string, out *stream.Emitter[string]) error {
		for _, w := range strings.Fields(line) {
			if err := out.Emit(w); err != nil {
				return err
			}
		}
		return nil
	})
	byWord := stream.KeyByPartitioned(words, "by-word", func(w string) string { return w }, state.String())
	seen := stream.Process(byWord, "seen", func(*stream.Setup) (stream.Processor[string, string, string], error) {
		return stream.Processor[string, string, string]{
			Process: func(ctx *stream.Context[string, string], w string) error { return ctx.Emit(w) },
		}, nil
	})
	stream.Sink(seen, "print", engine.SinkFactory[string](func(context.Context, engine.TaskInfo, []checkpoint.Committable) (engine.SinkWriter[string], error) {
		return &printSink{}, nil
	}))
	plan, err := job.Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	err = engine.Run(context.Background(), plan, engine.Config{
		Tasks:      []int{0},
		Partitions: 2,
		Storage:    checkpoint.NewMemory(checkpoint.MemoryOptions{}),
	})
	var mk *engine.MisKeyedError
	if errors.As(err, &mk) {
		fmt.Printf("%s: key %s belongs to task %d, not task %d\n", mk.Operator, mk.Key, mk.Owner, mk.Task)
	}
	// Output:
	// seen: key "or" belongs to task 1, not task 0
}
