package worker

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/runtime"
	"github.com/weirstream/weir/sink"
	"github.com/weirstream/weir/source"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/stream"
)

// Repartition keys s by key, moving each record to the task of its key
// through an internal topic, as Kafka Streams' repartition topics do: each
// task writes its records, with key encoded by keyCodec as the Kafka key
// (the partition follows its hash by --partitioner, as the input's
// producers place their keys, so that a key is in one task in both), to
// <name>-<op>-repartition in the transactions of its checkpoints, and reads
// partition task of that topic read_committed. A record therefore reaches
// its new task once the checkpoint that wrote it completes: exactly once,
// one checkpoint interval later. It returns the stream keyed by the same
// key and codec, so the state downstream follows the partitioning.
//
// The topic is created at start with the input's partition count and
// keeps its records (retention.ms -1, as Kafka Streams sets it). It belongs
// to one incarnation of the job (its checkpoints): a job that starts
// without checkpoints refuses a topic that holds records already, an
// earlier run's, which it would read as its own; and the job's layout
// record holds the topic's id and count, so that a topic deleted,
// recreated or given other partitions stops the job (see layout.go). Records keep their event time (the Kafka
// record timestamp), and event time goes on across the hop: each task
// writes its watermark into every partition with its records, and a task
// downstream goes on at the least watermark of the tasks upstream (see
// internal/marker), as a Flink operator does at the least of its input
// channels'. A record that was not late upstream is not late downstream.
//
// codec encodes a record as the internal record's value.
func Repartition[K, T any](w *Wiring, job *stream.Job, s stream.Stream[T], op string, key func(T) K, keyCodec state.Codec[K], codec state.Codec[T]) stream.KeyedStream[K, T] {
	c := w.cfg
	topic := c.name() + "-" + op + "-repartition"
	w.internal = append(w.internal, topic)

	sc := sink.Config[runtime.Timed[T]]{
		Brokers: c.Brokers,
		// Keys go where the input's producers put them (--partitioner):
		// the stream keyed after the hop meets the input's keys in their
		// tasks, and its KeyBy is checked by the job's one partitioner.
		ClientOpts:     append(w.sinkOpts(), kgo.RecordPartitioner(repartitioner(c.partitioner()))),
		MaxRecordBytes: int(c.Memory.ProducerBatchMaxBytes),
		Topic:          topic,
		Encode: func(v runtime.Timed[T]) (*kgo.Record, error) {
			b, err := state.Encode(codec, nil, v.Value)
			if err != nil {
				return nil, err
			}
			return &kgo.Record{Key: keyCodec.Append(nil, key(v.Value)), Value: b, Timestamp: v.Time}, nil
		},
		Delivery:    c.delivery(),
		Compression: c.Compression,
		Watermarks:  true,
	}
	if c.delivery() == sink.ExactlyOnce {
		sc.PoolSize = c.poolSize()
		sc.TransactionTimeout = c.TxnTimeout
	}
	out, err := sink.Kafka(sc)
	if err != nil {
		w.errs = append(w.errs, fmt.Errorf("repartition %s: %w", op, err))
		return stream.KeyBy(s, op, key, keyCodec)
	}
	stream.Sink(stream.WithEventTime(s, op+"-time"), op+"-write", out)

	rc := source.Config[T]{
		Brokers:        c.Brokers,
		ClientOpts:     w.sourceOpts(),
		MaxPollRecords: c.Memory.BatchSize,
		Topics:         []string{topic},
		Start:          source.StartEarliest,
		Decode:         func(r *kgo.Record) (T, error) { return codec.Decode(r.Value) },
		OnDecodeError:  source.Fail, // weir wrote it: a record that does not decode is a bug
		GroupID:        lagGroup(c),
		Watermarks:     true,
	}
	if _, err := source.Kafka(rc); err != nil {
		w.errs = append(w.errs, fmt.Errorf("repartition %s: %w", op, err))
		return stream.KeyBy(s, op, key, keyCodec)
	}
	src := func(ctx context.Context, info runtime.TaskInfo, restored []checkpoint.SourcePosition) (runtime.SourceReader[T], error) {
		tc := rc
		if w.kgo != nil {
			tc.ClientOpts = append(slices.Clip(tc.ClientOpts), kgo.WithHooks(w.kgo.hook(prometheus.Labels{"task": strconv.Itoa(info.Task), "client": op})))
		}
		f, err := source.Kafka(tc)
		if err != nil {
			return nil, err
		}
		return f(ctx, info, restored)
	}
	return stream.KeyBy(stream.Source(job, op+"-read", src), op, key, keyCodec)
}
