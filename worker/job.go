package worker

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/internal/jobenv"
	"github.com/weirstream/weir/sink"
	"github.com/weirstream/weir/source"
	"github.com/weirstream/weir/stream"
)

// Job is a job a worker can run: its name (--job) and how to add its graph,
// with its Kafka reads and writes (stream.Read, stream.Write), to a
// stream.Job.
type Job struct {
	name  string
	build func(job *stream.Job)
}

// NewJob returns the job called name whose graph build adds.
func NewJob(name string, build func(job *stream.Job)) Job {
	return Job{name: name, build: build}
}

// Registered are the jobs that registered themselves (stream.Register), in
// the order they did.
func Registered() []Job {
	var jobs []Job
	for _, r := range jobenv.Jobs() {
		jobs = append(jobs, Job{name: r.Name, build: func(job *stream.Job) { r.Build(job) }})
	}
	return jobs
}

// Name is the job's name (--job).
func (j Job) Name() string { return j.name }

// Stats counts records decoded from the job's inputs and written to its
// outputs. Output counts include records rewritten after a restore (whose
// first writes were aborted).
type Stats struct {
	perTask sync.Map // task -> *taskCounts
}

// Records returns the records decoded and written by the worker's tasks,
// those that left included.
func (s *Stats) Records() (in, out int64) {
	s.perTask.Range(func(_, c any) bool {
		in += c.(*taskCounts).in.Load()
		out += c.(*taskCounts).out.Load()
		return true
	})
	return in, out
}

// jobEnv is the Kafka of c for a job: the sources and sinks that the job's
// reads, writes and repartitions open. Its clients start with kafka's
// options; k, if set, gathers their metrics.
func jobEnv(c *Config, st *Stats, k *kpromSet, kafka []kgo.Opt) (*jobenv.Env, error) {
	start, startTime, err := c.start()
	if err != nil {
		return nil, fmt.Errorf("--start: %w", err)
	}
	sourceOpts := append(slices.Clip(kafka), c.Memory.sourceOpts()...)
	e := &jobenv.Env{
		Name:    c.name(),
		Brokers: c.Brokers,
		Topics:  c.Topics,
		Input:   c.Input,
		Output:  c.Output,
		SourceOpts: func(task int, client string) []kgo.Opt {
			opts := slices.Clip(sourceOpts)
			if k != nil {
				opts = append(opts, kgo.WithHooks(k.hook(prometheus.Labels{"task": strconv.Itoa(task), "client": client})))
			}
			return opts
		},
		// From the 8th task of a worker on, the tasks' readers of a
		// source share one client: one fetch per broker for all their
		// partitions, not one per task.
		Consumers: source.NewConsumers(c.Memory.queueBytes(), 0, func(client string, task int) []kgo.Opt {
			opts := slices.Clip(sourceOpts)
			if k != nil {
				label := strconv.Itoa(task)
				if task < 0 {
					label = "shared"
				}
				opts = append(opts, kgo.WithHooks(k.hook(prometheus.Labels{"task": label, "client": client})))
			}
			return opts
		}),
		SinkOpts:       append(slices.Clip(kafka), c.Memory.sinkOpts()...),
		Partitioner:    repartitioner(c.partitioner()),
		BatchSize:      c.Memory.BatchSize,
		Start:          start,
		StartTime:      startTime,
		OnDecodeError:  source.OnDecodeError(c.OnDecodeError),
		DeadLetter:     c.DeadLetter,
		LagGroup:       lagGroup(c),
		CheckRecord:    c.Memory.checkRecord,
		Delivery:       c.delivery(),
		Compression:    c.Compression,
		MaxRecordBytes: int(c.Memory.ProducerBatchMaxBytes),
		In:             func(t int) *atomic.Int64 { return &st.task(t).in },
		Out:            func(t int) *atomic.Int64 { return &st.task(t).out },
		DeadLettered:   func(t int) *atomic.Int64 { return &st.task(t).undecoded },
		WriteError:     func(err error) error { return tooLarge(err, c.Memory.ProducerBatchMaxBytes) },
	}
	if c.delivery() == sink.ExactlyOnce {
		e.PoolSize = c.poolSize()
		e.TransactionTimeout = c.TxnTimeout
		e.FlushTarget = c.Interval
		e.InFlight = sink.NewInFlightBudget(c.Memory.InFlightRecords)
	}
	return e, nil
}

// tooLarge adds to the error of a record the producer (sink's
// RecordTooLargeError) or a broker (MESSAGE_TOO_LARGE) refused the limits
// it must fit.
func tooLarge(err error, maxBytes int64) error {
	if err == nil || !errors.Is(err, kerr.MessageTooLarge) {
		return err
	}
	return fmt.Errorf("%w: %w; an output record must fit --producer-batch-max-bytes %d and the topic's max.message.bytes", ErrRecordTooLarge, err, maxBytes)
}

// buildPlan builds the plan of the job c names among jobs, and returns
// what it declared: its input, output and internal topics. Its Kafka
// clients start with kafka's options.
func buildPlan(c *Config, jobs []Job, st *Stats, k *kpromSet, kafka []kgo.Opt) (*engine.Plan, *jobenv.Env, error) {
	j, err := pickJob(c, jobs)
	if err != nil {
		return nil, nil, err
	}
	e, err := jobEnv(c, st, k, kafka)
	if err != nil {
		return nil, nil, err
	}
	job := stream.NewJob(c.name())
	jobenv.Bind(job, e)
	j.build(job)
	plan, err := job.Build()
	if err != nil {
		return nil, nil, err
	}
	if len(e.Inputs) == 0 {
		return nil, nil, fmt.Errorf("job %s reads no Kafka topic (stream.Read): a worker runs jobs that read Kafka", j.name)
	}
	return plan, e, nil
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
