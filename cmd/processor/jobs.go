package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/examples/balance"
	"github.com/weirstream/weir/runtime"
	"github.com/weirstream/weir/sink"
	"github.com/weirstream/weir/source"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/stream"
)

// The count job, as the kill -9 tests read it. Input: key "k17", value the
// decimal text of an int64. Output, one record per input record: key "k17",
// value {"key":"k17","count":3,"sum":12345}, the key's running count and sum
// after that record.

// countIn is one input record of the count job.
type countIn struct {
	Key string
	N   int64
}

// countOut is what the count job emits for each input record.
type countOut struct {
	Key   string `json:"key"`
	Count int64  `json:"count"`
	Sum   int64  `json:"sum"`
}

func decodeCount(r *kgo.Record) (countIn, error) {
	if len(r.Key) == 0 {
		return countIn{}, errors.New("count: record has no key")
	}
	n, err := strconv.ParseInt(string(r.Value), 10, 64)
	if err != nil {
		return countIn{}, fmt.Errorf("count: value %q is not a decimal int64", r.Value)
	}
	return countIn{Key: string(r.Key), N: n}, nil
}

func encodeCount(o countOut) (*kgo.Record, error) {
	v, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	return &kgo.Record{Key: []byte(o.Key), Value: v}, nil
}

// buildCount wires src -> KeyBy(record key) -> count -> out. Keying by the
// Kafka record key keeps every key in the task of its partition: no
// repartition.
func buildCount(job *stream.Job, src runtime.SourceFactory[countIn], out runtime.SinkFactory[countOut]) {
	in := stream.Source(job, "input", src)
	keyed := stream.KeyBy(in, "by-key", func(r countIn) string { return r.Key }, state.String())
	counts := stream.Process(keyed, "count", func(s *stream.Setup) (stream.Processor[string, countIn, countOut], error) {
		count, err := stream.ValueState(s, "count", state.Int64())
		if err != nil {
			return stream.Processor[string, countIn, countOut]{}, err
		}
		sum, err := stream.ValueState(s, "sum", state.Int64())
		if err != nil {
			return stream.Processor[string, countIn, countOut]{}, err
		}
		return stream.Processor[string, countIn, countOut]{
			Process: func(ctx *stream.Context[string, countOut], r countIn) error {
				c, _, err := count.Get()
				if err != nil {
					return err
				}
				s, _, err := sum.Get()
				if err != nil {
					return err
				}
				c, s = c+1, s+r.N
				if err := count.Set(c); err != nil {
					return err
				}
				if err := sum.Set(s); err != nil {
					return err
				}
				return ctx.Emit(countOut{Key: ctx.Key(), Count: c, Sum: s})
			},
		}, nil
	})
	stream.Sink(counts, "output", out)
}

// recordStats counts records decoded from the input and encoded for the
// output. Output counts include records rewritten after a restore (whose
// first writes were aborted).
type recordStats struct {
	in, out atomic.Int64
}

// buildPlan builds the plan of c.Job on Kafka.
func buildPlan(c *Config, st *recordStats) (*runtime.Plan, error) {
	job := stream.NewJob(c.name())
	var err error
	switch c.Job {
	case "count":
		err = wireKafka(c, st, job, decodeCount, encodeCount, buildCount)
	case "balance":
		err = wireKafka(c, st, job, balance.Decode, balance.Encode, balance.Build)
	default:
		err = fmt.Errorf("--job: unknown job %q", c.Job)
	}
	if err != nil {
		return nil, err
	}
	return job.Build()
}

// wireKafka makes the Kafka source and sink of a job from c and lets build
// add the graph between them.
func wireKafka[In, Out any](c *Config, st *recordStats, job *stream.Job,
	decode source.Decoder[In], encode sink.Encoder[Out],
	build func(*stream.Job, runtime.SourceFactory[In], runtime.SinkFactory[Out]),
) error {
	start, startTime, err := c.start()
	if err != nil {
		return fmt.Errorf("--start: %w", err)
	}
	src, err := source.Kafka(source.Config[In]{
		Brokers:   c.Brokers,
		Topics:    []string{c.Input},
		Start:     start,
		StartTime: startTime,
		Decode: func(r *kgo.Record) (In, error) {
			v, err := decode(r)
			if err == nil {
				st.in.Add(1)
			}
			return v, err
		},
		OnDecodeError:   source.OnDecodeError(c.OnDecodeError),
		DeadLetterTopic: c.DeadLetter,
		GroupID:         lagGroup(c),
	})
	if err != nil {
		return err
	}
	sc := sink.Config[Out]{
		Brokers: c.Brokers,
		Topic:   c.Output,
		Encode: func(v Out) (*kgo.Record, error) {
			r, err := encode(v)
			if err == nil {
				st.out.Add(1)
			}
			return r, err
		},
		Delivery: c.delivery(),
	}
	if c.delivery() == sink.ExactlyOnce {
		sc.PoolSize = c.poolSize()
		sc.TransactionTimeout = c.TxnTimeout
	}
	out, err := sink.Kafka(sc)
	if err != nil {
		return err
	}
	build(job, src, out)
	return nil
}

// lagGroup is the consumer group whose offsets the worker commits for lag
// monitoring. Not the job's own group: the Committer may not commit into a
// group with active members.
func lagGroup(c *Config) string { return c.name() + "-lag" }
