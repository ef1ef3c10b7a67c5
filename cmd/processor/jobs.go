package main

import (
	"fmt"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/examples/balance"
	"github.com/weirstream/weir/examples/count"
	"github.com/weirstream/weir/runtime"
	"github.com/weirstream/weir/sink"
	"github.com/weirstream/weir/source"
	"github.com/weirstream/weir/stream"
)

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
		err = wireKafka(c, st, job, count.Decode, count.Encode, count.Build)
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
