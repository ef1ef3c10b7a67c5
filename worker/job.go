package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/runtime"
	"github.com/weirstream/weir/sink"
	"github.com/weirstream/weir/source"
	"github.com/weirstream/weir/stream"
)

// Job is a job a worker can run: its name and how to add its graph to a
// stream.Job, given the Kafka source and sink its configuration asks for.
type Job struct {
	name  string
	build func(w *Wiring, job *stream.Job) error
}

// NewJob returns a job whose build adds its graph; build gets its Kafka
// sources and sinks from w (Source, Sink).
func NewJob(name string, build func(w *Wiring, job *stream.Job) error) Job {
	return Job{name: name, build: build}
}

// Pipeline is the common job: one Kafka source (--input) decoded with
// decode, a graph built by build, one Kafka sink (--output) encoded with
// encode.
func Pipeline[In, Out any](name string, decode source.Decoder[In], encode sink.Encoder[Out],
	build func(job *stream.Job, src runtime.SourceFactory[In], out runtime.SinkOpener[Out]),
) Job {
	return NewJob(name, func(w *Wiring, job *stream.Job) error {
		build(job, Source(w, decode), Sink(w, encode))
		return nil
	})
}

// Name is the job's name (--job).
func (j Job) Name() string { return j.name }

// Stats counts records decoded from the input and encoded for the output.
// Output counts include records rewritten after a restore (whose first
// writes were aborted).
type Stats struct {
	In, Out atomic.Int64
	perTask sync.Map // task -> *taskCounts
}

// Wiring hands a job's build function the Kafka sources and sinks of the
// worker's configuration. Errors are collected and reported by Run.
type Wiring struct {
	cfg   *Config
	stats *Stats
	kgo   *kpromSet // kgo client metrics of the tasks' sources
	kafka []kgo.Opt // every client's options: Config.Security
	errs  []error
	// internal are the job's internal topics (Repartition), created at
	// start with the input's partition count.
	internal []string
}

// Config is the worker's configuration (read only).
func (w *Wiring) Config() Config { return *w.cfg }

// Source is the Kafka source of the worker's --input topic: records decoded
// with decode, read read_committed from each task's checkpointed offsets;
// records that fail to decode go to --dead-letter or fail the task
// (--on-decode-error).
func Source[T any](w *Wiring, decode source.Decoder[T]) runtime.SourceFactory[T] {
	c := w.cfg
	start, startTime, err := c.start()
	if err != nil {
		w.errs = append(w.errs, fmt.Errorf("--start: %w", err))
		return nil
	}
	sc := source.Config[T]{
		Brokers:        c.Brokers,
		ClientOpts:     w.sourceOpts(),
		MaxPollRecords: c.Memory.BatchSize,
		Topics:         []string{c.Input},
		Start:          start,
		StartTime:      startTime,
		Decode: func(r *kgo.Record) (T, error) {
			// A record over the bound is a bad record: the source
			// dead-letters it or fails the task, naming where it is.
			if err := c.Memory.checkRecord(r); err != nil {
				var zero T
				return zero, err
			}
			v, err := decode(r)
			if err == nil {
				w.stats.In.Add(1)
				w.stats.task(int(r.Partition)).in.Add(1) // task p reads partition p
			}
			return v, err
		},
		OnDecodeError:   source.OnDecodeError(c.OnDecodeError),
		DeadLetterTopic: c.DeadLetter,
		GroupID:         lagGroup(c),
	}
	if _, err := source.Kafka(sc); err != nil {
		w.errs = append(w.errs, err)
		return nil
	}
	// A source per task, so that its kgo client reports metrics labelled
	// with the task.
	return func(ctx context.Context, info runtime.TaskInfo, restored []checkpoint.SourcePosition) (runtime.SourceReader[T], error) {
		tc := sc
		if w.kgo != nil {
			tc.ClientOpts = append(slices.Clip(tc.ClientOpts), kgo.WithHooks(w.kgo.hook(prometheus.Labels{"task": strconv.Itoa(info.Task), "client": "source"})))
		}
		f, err := source.Kafka(tc)
		if err != nil {
			return nil, err
		}
		return f(ctx, info, restored)
	}
}

// Sink is the Kafka sink of the worker's --output topic with its
// --delivery guarantee: exactly-once writes each checkpoint's output in one
// transaction, committed when the checkpoint completes.
func Sink[T any](w *Wiring, encode sink.Encoder[T]) runtime.SinkOpener[T] {
	c := w.cfg
	sc := sink.Config[T]{
		Brokers:        c.Brokers,
		ClientOpts:     w.sinkOpts(),
		MaxRecordBytes: int(c.Memory.ProducerBatchMaxBytes),
		Topic:          c.Output,
		Encode: func(v T) (*kgo.Record, error) {
			r, err := encode(v)
			if err == nil {
				w.stats.Out.Add(1)
			}
			return r, err
		},
		Delivery:    c.delivery(),
		Compression: c.Compression,
	}
	if c.delivery() == sink.ExactlyOnce {
		sc.PoolSize = c.poolSize()
		sc.TransactionTimeout = c.TxnTimeout
	}
	out, err := sink.Kafka(sc)
	if err != nil {
		w.errs = append(w.errs, err)
		return nil
	}
	return countingSink[T]{KafkaSink: out, stats: w.stats, maxBytes: c.Memory.ProducerBatchMaxBytes}
}

// countingSink is the Kafka sink whose writers count each task's output
// records; restores ask the Kafka sink about its transactions.
type countingSink[T any] struct {
	*sink.KafkaSink[T]
	stats    *Stats
	maxBytes int64
}

func (s countingSink[T]) Open(ctx context.Context, info runtime.TaskInfo, restored []checkpoint.Committable) (runtime.SinkWriter[T], error) {
	sw, err := s.KafkaSink.Open(ctx, info, restored)
	if err != nil {
		return nil, err
	}
	return countingWriter[T]{SinkWriter: sw, n: &s.stats.task(info.Task).out, maxBytes: s.maxBytes}, nil
}

// sourceOpts are the Kafka options of the tasks' sources.
func (w *Wiring) sourceOpts() []kgo.Opt {
	return append(slices.Clip(w.kafka), w.cfg.Memory.sourceOpts()...)
}

// sinkOpts are the Kafka options of the tasks' sinks.
func (w *Wiring) sinkOpts() []kgo.Opt {
	return append(slices.Clip(w.kafka), w.cfg.Memory.sinkOpts()...)
}

// countingWriter counts a task's output records, and names the settings
// an output record too large runs into.
type countingWriter[T any] struct {
	runtime.SinkWriter[T]
	n        *atomic.Int64
	maxBytes int64 // --producer-batch-max-bytes
}

func (c countingWriter[T]) Write(ctx context.Context, v T) error {
	if err := c.SinkWriter.Write(ctx, v); err != nil {
		return c.tooLarge(err)
	}
	c.n.Add(1)
	return nil
}

// PreCommit passes the sink's, which reports a record the brokers refused.
func (c countingWriter[T]) PreCommit(ctx context.Context, id checkpoint.ID) ([]checkpoint.Committable, error) {
	cs, err := c.SinkWriter.PreCommit(ctx, id)
	return cs, c.tooLarge(err)
}

// tooLarge adds to the error of a record the producer (sink's
// RecordTooLargeError) or a broker (MESSAGE_TOO_LARGE) refused the limits
// it must fit.
func (c countingWriter[T]) tooLarge(err error) error {
	if err == nil || !errors.Is(err, kerr.MessageTooLarge) {
		return err
	}
	return fmt.Errorf("%w: %w; an output record must fit --producer-batch-max-bytes %d and the topic's max.message.bytes", ErrRecordTooLarge, err, c.maxBytes)
}

// WriteAt passes the event time on to the Kafka sink.
func (c countingWriter[T]) WriteAt(ctx context.Context, v T, ts int64) error {
	tw, ok := c.SinkWriter.(runtime.TimestampWriter[T])
	if !ok {
		return c.Write(ctx, v)
	}
	if err := tw.WriteAt(ctx, v, ts); err != nil {
		return c.tooLarge(err)
	}
	c.n.Add(1)
	return nil
}

// buildPlan builds the plan of the job c names among jobs, and lists the
// internal topics it needs. Its Kafka clients start with kafka's options.
func buildPlan(c *Config, jobs []Job, st *Stats, k *kpromSet, kafka []kgo.Opt) (*runtime.Plan, []string, error) {
	j, err := pickJob(c, jobs)
	if err != nil {
		return nil, nil, err
	}
	job := stream.NewJob(c.name())
	w := &Wiring{cfg: c, stats: st, kgo: k, kafka: kafka}
	if err := j.build(w, job); err != nil {
		w.errs = append(w.errs, err)
	}
	if err := errors.Join(w.errs...); err != nil {
		return nil, nil, err
	}
	plan, err := job.Build()
	return plan, w.internal, err
}

// pickJob finds the job c names; with one job and no name, that one.
func pickJob(c *Config, jobs []Job) (Job, error) {
	var names []string
	for _, j := range jobs {
		if j.name == c.Job || (c.Job == "" && len(jobs) == 1) {
			return j, nil
		}
		names = append(names, j.name)
	}
	if c.Job == "" {
		return Job{}, fmt.Errorf("--job: required, want one of %v", names)
	}
	return Job{}, fmt.Errorf("--job: %q, want one of %v", c.Job, names)
}

// lagGroup is the consumer group whose offsets the worker commits for lag
// monitoring: not the job's own group, whose members are the workers (a
// group with active members takes no offsets from outside).
func lagGroup(c *Config) string { return c.name() + "-lag" }
