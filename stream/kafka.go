package stream

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/internal/jobenv"
	"github.com/weirstream/weir/sink"
	"github.com/weirstream/weir/source"
	"github.com/weirstream/weir/state"
)

func init() {
	jobenv.Bind = func(job any, env *jobenv.Env) { job.(*Job).env = env }
}

// Decoder turns a Kafka record into a value; an error makes the record a
// bad record (dead-lettered or failing the task, as the worker is set).
type Decoder[T any] = source.Decoder[T]

// Encoder turns a value into a Kafka record: its key, value, headers and,
// if set, timestamp (by default the event time of the value). Its topic is
// the Write's.
type Encoder[T any] = sink.Encoder[T]

// AppendEncoder returns an Encoder that allocates nothing a record: enc
// appends a value's record key to key and its value to value, and the
// sink reuses the record and both buffers once the record is written.
// Return nil for a null key or value; enc may not keep the buffers. See
// sink.AppendEncoder.
func AppendEncoder[T any](enc func(key, value []byte, v T) ([]byte, []byte, error)) Encoder[T] {
	return sink.AppendEncoder(enc)
}

// read is a Kafka topic the job reads, resolved at Build.
type read struct {
	name, topic string
	// open makes the source of topic, the one to read in env.
	open func(env *jobenv.Env, topic string) error
}

// write is a Kafka topic the job writes, resolved at Build.
type write struct {
	name, topic string
	// add adds the write's operators: a sink of its own to topic, or
	// (shared) an encoding map whose records the job's one sink writes.
	add func(env *jobenv.Env, topic string, shared bool) *engine.Port[*kgo.Record]
}

// Read adds a Kafka source: the records of topic, decoded with decode,
// read read_committed. Task p reads partition p of every topic the job
// reads, from the offsets of its latest checkpoint, so the job's input
// topics must have one partition count (checked at start). name names the
// operator; topic is the job's name for the topic, which a worker setting
// points elsewhere (--topic NAME=TOPIC, or --input for a job that reads
// one topic).
//
// Reads and writes need the Kafka a worker gives the job: a test runs the
// graph between them over slices, with Source and Sink.
func Read[T any](j *Job, name, topic string, decode Decoder[T]) Stream[T] {
	return Source(j, name, declareRead(j, name, topic, decode))
}

// ReadWithWatermarks is Read with event time: w derives the watermarks
// from the records (see SourceWithWatermarks).
func ReadWithWatermarks[T any](j *Job, name, topic string, decode Decoder[T], w Watermarks[T]) Stream[T] {
	return SourceWithWatermarks(j, name, declareRead(j, name, topic, decode), w)
}

// declareRead declares a Kafka read and returns the factory of its tasks'
// sources, which Build makes real.
func declareRead[T any](j *Job, name, topic string, decode Decoder[T]) engine.SourceFactory[T] {
	var open engine.SourceFactory[T]
	j.reads = append(j.reads, &read{name: name, topic: topic, open: func(env *jobenv.Env, topic string) error {
		if decode == nil {
			return fmt.Errorf("read %q: decoder is nil", name)
		}
		f, err := kafkaSource(env, name, topic, decode)
		open = f
		return err
	}})
	return func(ctx context.Context, info engine.TaskInfo, restored []checkpoint.SourcePosition) (engine.SourceReader[T], error) {
		if open == nil {
			return nil, fmt.Errorf("read %q: the job was not built with Kafka", name)
		}
		return open(ctx, info, restored)
	}
}

// kafkaSource is the source of topic in env. Each task's client is its
// own, so that its metrics carry the task.
func kafkaSource[T any](env *jobenv.Env, op, topic string, decode Decoder[T]) (engine.SourceFactory[T], error) {
	sc := source.Config[T]{
		Brokers:             env.Brokers,
		MaxPollRecords:      env.BatchSize,
		Topics:              []string{topic},
		Start:               env.Start,
		StartTime:           env.StartTime,
		Decode:              decode,
		OnDecodeError:       env.OnDecodeError,
		DeadLetterTopic:     env.DeadLetter,
		GroupID:             env.LagGroup,
		DropUnreadPositions: env.DropUnreadPositions,
	}
	if _, err := source.Kafka(sc); err != nil { // the settings, checked once
		return nil, fmt.Errorf("read %q: %w", op, err)
	}
	return func(ctx context.Context, info engine.TaskInfo, restored []checkpoint.SourcePosition) (engine.SourceReader[T], error) {
		tc := sc
		tc.Consumers = env.Consumers
		if env.SourceOpts != nil && env.Consumers == nil {
			tc.ClientOpts = env.SourceOpts(info.Task, op)
		}
		in := new(atomic.Int64)
		if env.In != nil {
			in = env.In(info.Task)
		}
		if env.DeadLettered != nil {
			dead := env.DeadLettered(info.Task)
			tc.DeadLettered = func() { dead.Add(1) }
		}
		check := env.CheckRecord
		tc.Decode = func(r *kgo.Record) (T, error) {
			// A record over the worker's bounds is a bad record: the
			// source dead-letters it or fails the task, naming where.
			if check != nil {
				if err := check(r); err != nil {
					var zero T
					return zero, err
				}
			}
			v, err := decode(r)
			if err == nil {
				in.Add(1)
			}
			return v, err
		}
		f, err := source.Kafka(tc)
		if err != nil {
			return nil, err
		}
		return f(ctx, info, restored)
	}, nil
}

// Write adds a Kafka sink: the records of s, encoded with encode, written
// to topic. Under exactly-once delivery (the worker's default) a task's
// output of each checkpoint is one Kafka transaction, committed when the
// checkpoint completes; a job that writes several topics writes them all
// in that one transaction. name names the operator; topic is the job's
// name for the topic, which a worker setting points elsewhere (--topic
// NAME=TOPIC, or --output for a job that writes one topic).
func Write[T any](s Stream[T], name, topic string, encode Encoder[T]) {
	j := s.j
	j.writes = append(j.writes, &write{name: name, topic: topic, add: func(env *jobenv.Env, topic string, shared bool) *engine.Port[*kgo.Record] {
		if encode == nil {
			j.g.Fail(fmt.Errorf("write %q: encoder is nil", name))
			return nil
		}
		if !shared {
			if out := kafkaSink(j, env, name, []string{topic}, encode, false); out != nil {
				Sink(s, name, out)
			}
			return nil
		}
		// One of several writes: encoded here, written by the job's one
		// sink in one transaction with the others.
		return engine.Map(s.p, name, func(v T) (*kgo.Record, error) {
			r, err := encode(v)
			if err != nil {
				return nil, err
			}
			r.Topic = topic
			return r, nil
		})
	}})
}

// WritesName names the sink that writes the records of a job's several
// writes, in one transaction per task and checkpoint.
const WritesName = "kafka-writes"

// resolve opens the job's reads and writes in its environment.
func (j *Job) resolve() {
	reads, writes := j.reads, j.writes
	j.reads, j.writes = nil, nil
	if len(reads)+len(writes) == 0 {
		return
	}
	env := j.env
	if env == nil {
		var names []string
		for _, r := range reads {
			names = append(names, "read "+r.name)
		}
		for _, w := range writes {
			names = append(names, "write "+w.name)
		}
		j.g.Fail(fmt.Errorf("%s: need the Kafka a worker gives the job (worker.Main runs it); "+
			"test the graph between them over slices, with Source and Sink", strings.Join(names, ", ")))
		return
	}
	if env.Input != "" && len(reads) != 1 {
		var ts []string
		for _, r := range reads {
			ts = append(ts, r.topic)
		}
		j.g.Fail(fmt.Errorf("--input: the job reads %d topics (%s): point each elsewhere with --topic NAME=TOPIC", len(reads), strings.Join(ts, ", ")))
	}
	if env.Output != "" && len(writes) != 1 {
		var ts []string
		for _, w := range writes {
			ts = append(ts, w.topic)
		}
		j.g.Fail(fmt.Errorf("--output: the job writes %d topics (%s): point each elsewhere with --topic NAME=TOPIC", len(writes), strings.Join(ts, ", ")))
	}
	// Every --topic NAME=TOPIC must name a topic of the job's, and not one
	// --input or --output already points elsewhere: a typo would leave
	// the job on its own topic, and one of two flags would win unsaid.
	declared := map[string]bool{}
	for _, r := range reads {
		declared[r.topic] = true
		if _, ok := env.Topics[r.topic]; ok && env.Input != "" {
			j.g.Fail(fmt.Errorf("--input %s and --topic %s=%s both point the job's read %q elsewhere: give one", env.Input, r.topic, env.Topics[r.topic], r.name))
		}
	}
	for _, w := range writes {
		declared[w.topic] = true
		if _, ok := env.Topics[w.topic]; ok && env.Output != "" {
			j.g.Fail(fmt.Errorf("--output %s and --topic %s=%s both point the job's write %q elsewhere: give one", env.Output, w.topic, env.Topics[w.topic], w.name))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(env.Topics)) {
		if !declared[name] {
			j.g.Fail(fmt.Errorf("--topic %s=%s: the job has no topic %q (it reads and writes %s)", name, env.Topics[name], name,
				strings.Join(slices.Sorted(maps.Keys(declared)), ", ")))
		}
	}
	for _, r := range reads {
		topic := env.Resolve(r.topic)
		if env.Input != "" {
			topic = env.Input
		}
		if err := r.open(env, topic); err != nil {
			j.g.Fail(err)
		}
		if !slices.Contains(env.Inputs, topic) {
			env.Inputs = append(env.Inputs, topic)
		}
	}
	var recs []*engine.Port[*kgo.Record]
	for _, w := range writes {
		topic := env.Resolve(w.topic)
		if env.Output != "" {
			topic = env.Output
		}
		if slices.Contains(env.Inputs, topic) {
			j.g.Fail(fmt.Errorf("write %q: topic %s is also an input of the job", w.name, topic))
		}
		if p := w.add(env, topic, len(writes) > 1); p != nil {
			recs = append(recs, p)
		}
		env.Outputs = append(env.Outputs, topic)
	}
	if len(recs) > 1 { // fewer only where a write failed Build already
		all := Stream[*kgo.Record]{j: j, p: engine.Union(WritesName, recs...)}
		if out := kafkaSink(j, env, WritesName, env.Outputs, func(r *kgo.Record) (*kgo.Record, error) { return r, nil }, false); out != nil {
			Sink(all, WritesName+"-sink", out)
		}
	}
}

// kafkaSink is the sink of topics in env (records go to the first unless
// encoded for another), with the worker's delivery; a KeyBy's (watermarks)
// writes the task's watermarks with its records and counts nothing as the
// job's output.
func kafkaSink[T any](j *Job, env *jobenv.Env, op string, topics []string, encode Encoder[T], watermarks bool, opts ...kgo.Opt) engine.SinkOpener[T] {
	sc := sink.Config[T]{
		Brokers:        env.Brokers,
		ClientOpts:     append(slices.Clip(env.SinkOpts), opts...),
		MaxRecordBytes: env.MaxRecordBytes,
		Topic:          topics[0],
		Topics:         topics[1:],
		Encode:         encode,
		Delivery:       env.Delivery,
		Compression:    env.Compression,
		Watermarks:     watermarks,
	}
	if env.Delivery == sink.ExactlyOnce {
		sc.PoolSize = env.PoolSize
		sc.TransactionTimeout = env.TransactionTimeout
		sc.FlushTarget = env.FlushTarget
		sc.InFlight = env.InFlight
	}
	out, err := sink.Kafka(sc)
	if err != nil {
		j.g.Fail(fmt.Errorf("write %q: %w", op, err))
		return nil
	}
	if watermarks {
		// Internal: not the job's output, and its writers take the
		// task's watermarks (engine.WatermarkWriter) as they are.
		return out
	}
	return annotatedSink[T]{KafkaSink: out, env: env}
}

// annotatedSink is a Kafka sink whose writers count each task's output
// records and annotate the errors of refused records; restores ask the
// Kafka sink about its transactions.
type annotatedSink[T any] struct {
	*sink.KafkaSink[T]
	env *jobenv.Env
}

func (s annotatedSink[T]) Open(ctx context.Context, info engine.TaskInfo, restored []checkpoint.Committable) (engine.SinkWriter[T], error) {
	sw, err := s.KafkaSink.Open(ctx, info, restored)
	if err != nil {
		return nil, err
	}
	n := new(atomic.Int64)
	if s.env.Out != nil {
		n = s.env.Out(info.Task)
	}
	annotate := s.env.WriteError
	if annotate == nil {
		annotate = func(err error) error { return err }
	}
	tw, _ := sw.(engine.TimestampWriter[T]) // once, not per record
	return annotatedWriter[T]{SinkWriter: sw, tw: tw, n: n, annotate: annotate}, nil
}

// annotatedWriter counts a task's output records, and annotates the errors
// of records the producer or the brokers refused.
type annotatedWriter[T any] struct {
	engine.SinkWriter[T]
	tw       engine.TimestampWriter[T] // the writer, if it is one
	n        *atomic.Int64
	annotate func(error) error
}

func (c annotatedWriter[T]) Write(ctx context.Context, v T) error {
	if err := c.SinkWriter.Write(ctx, v); err != nil {
		return c.annotate(err)
	}
	c.n.Add(1)
	return nil
}

func (c annotatedWriter[T]) PreCommit(ctx context.Context, id checkpoint.ID) ([]checkpoint.Committable, error) {
	cs, err := c.SinkWriter.PreCommit(ctx, id)
	if err != nil {
		err = c.annotate(err)
	}
	return cs, err
}

// Commit annotates its error too: it reports a failed record of the
// transaction written meanwhile (the next checkpoint's) when that came first.
func (c annotatedWriter[T]) Commit(ctx context.Context, id checkpoint.ID) error {
	if err := c.SinkWriter.Commit(ctx, id); err != nil {
		return c.annotate(err)
	}
	return nil
}

// WriteAt passes the event time on to the Kafka sink.
func (c annotatedWriter[T]) WriteAt(ctx context.Context, v T, ts int64) error {
	if c.tw == nil {
		return c.Write(ctx, v)
	}
	if err := c.tw.WriteAt(ctx, v, ts); err != nil {
		return c.annotate(err)
	}
	c.n.Add(1)
	return nil
}

// KeyBy keys s by key, moving each record to the task that owns its key,
// as Flink's keyBy and Kafka Streams' groupBy do. Under a worker the
// records go through an internal topic, "<job>-<name>-repartition": each
// task writes its records there in the transactions of its checkpoints,
// keyed by keyCodec's bytes and placed by the worker's partitioner (as the
// input's producers place their keys, so that a key has one task on both
// sides of the move), and reads its own partition of it read_committed. A
// record therefore reaches its new task once the checkpoint that wrote it
// completes: exactly once, one checkpoint interval later. codec encodes a
// record as the internal record's value. Records keep their event time,
// and watermarks cross the move: each task writes its watermark into every
// partition, and a task downstream goes on at the least of the tasks
// upstream.
//
// The internal topic is created at start with the input's partition count
// and belongs to one incarnation of the job: a job that starts without a
// checkpoint refuses one that holds records already (docs/operating.md).
//
// When the stream is partitioned by the key already (keyed by the Kafka
// record key of the input), KeyByPartitioned keys it without the move.
// Built without Kafka (a test over slices), KeyBy moves nothing, and the
// plan runs task 0 alone.
func KeyBy[K, T any](s Stream[T], name string, key func(T) K, keyCodec state.Codec[K], codec state.Codec[T]) KeyedStream[K, T] {
	j := s.j
	if key == nil || keyCodec == nil || codec == nil {
		j.g.Fail(fmt.Errorf("keyBy %q: key function, key codec and codec are required", name))
		return KeyByPartitioned(s, name, key, keyCodec)
	}
	env := j.env
	if env == nil {
		j.g.OneTask(name)
		return LocalKeyBy(s, name, key, keyCodec)
	}
	topic := env.Name + "-" + name + "-repartition"
	env.Internal = append(env.Internal, topic)
	// The moved records' buffers are the sink's to reuse (AppendEncoder):
	// a KeyBy writes and reads every record once more.
	appendKV := sink.AppendEncoder(func(k, b []byte, v Timed[T]) ([]byte, []byte, error) {
		b, err := state.Encode(codec, b, v.Value)
		if err != nil {
			return k, b, err
		}
		// Checked: a key that fails to encode (JSON of a NaN) would
		// move, and share state, with every other that fails alike.
		k, err = state.Encode(keyCodec, k, key(v.Value))
		if err != nil {
			err = fmt.Errorf("keyBy %q: encode the key: %w", name, err)
		}
		return k, b, err
	})
	encode := func(v Timed[T]) (*kgo.Record, error) {
		r, err := appendKV(v)
		if err != nil {
			return nil, err
		}
		r.Timestamp = v.Time
		return r, nil
	}
	var opts []kgo.Opt
	if env.Partitioner != nil {
		opts = append(opts, kgo.RecordPartitioner(env.Partitioner))
	}
	if out := kafkaSink(j, env, name+"-write", []string{topic}, encode, true, opts...); out != nil {
		Sink(WithEventTime(s, name+"-time"), name+"-write", out)
	}
	rc := source.Config[T]{
		Brokers:        env.Brokers,
		MaxPollRecords: env.BatchSize,
		Topics:         []string{topic},
		Start:          source.StartEarliest,
		Decode:         movedDecoder(name, key, keyCodec, codec),
		OnDecodeError:  source.Fail, // weir wrote it: a record that does not decode is a bug
		GroupID:        env.LagGroup,
		Watermarks:     true,
	}
	if _, err := source.Kafka(rc); err != nil {
		j.g.Fail(fmt.Errorf("keyBy %q: %w", name, err))
	}
	src := func(ctx context.Context, info engine.TaskInfo, restored []checkpoint.SourcePosition) (engine.SourceReader[T], error) {
		tc := rc
		tc.Decode = movedDecoder(name, key, keyCodec, codec) // a buffer per reader
		tc.Consumers = env.Consumers
		if env.SourceOpts != nil && env.Consumers == nil {
			tc.ClientOpts = env.SourceOpts(info.Task, name)
		}
		f, err := source.Kafka(tc)
		if err != nil {
			return nil, err
		}
		return f(ctx, info, restored)
	}
	return KeyByPartitioned(Source(j, name+"-read", src), name, key, keyCodec)
}

// movedDecoder decodes the records a KeyBy moved, and checks that each
// one's key, computed again from the decoded value (as the keyed operator
// after the move does), is the key it was moved by, the record's. A codec
// that does not give back the fields the key function reads (a JSON codec
// and a string that is not UTF-8, a field it skips) would otherwise key
// the record by another key: in the task of its own key (else the key
// check stops the task), but with the state of another, merging keys
// without a word. A reader uses it from one goroutine.
func movedDecoder[K, T any](name string, key func(T) K, keyCodec state.Codec[K], codec state.Codec[T]) func(*kgo.Record) (T, error) {
	var buf []byte
	return func(r *kgo.Record) (T, error) {
		v, err := codec.Decode(r.Value)
		if err != nil {
			return v, err
		}
		if buf = keyCodec.Append(buf[:0], key(v)); !bytes.Equal(buf, r.Key) {
			var zero T
			return zero, fmt.Errorf("keyBy %q: the record read back has key %q where it was moved by key %q: "+
				"its codec does not give back what the key function reads, so records of distinct keys would share state; "+
				"use a codec that gives back the fields the key is made of", name, buf, r.Key)
		}
		return v, nil
	}
}

// Register makes build the job called name of a worker binary: `processor
// run --job name` (or a binary's worker.Main) runs it. A job registers
// itself from its package's init, so that a binary gets its jobs by
// importing their packages. Registering one name twice panics.
func Register(name string, build func(job *Job)) {
	if err := jobenv.Register(name, func(job any) { build(job.(*Job)) }); err != nil {
		panic("stream.Register: " + err.Error())
	}
}
