// Package jobenv is what a worker hands a job's graph so that its Kafka
// reads, writes and repartitions open real clients: the brokers, the
// client options and the worker's settings that shape each source and
// sink. Package stream declares a job's topics; the worker binds an Env to
// the job before the job's build function runs (Bind), and reads back what
// the job declared (its input, output and internal topics) after it.
//
// It sits under internal/ so that a job author meets one face, stream, and
// the worker its only caller: nothing here is an API.
package jobenv

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/sink"
	"github.com/weirstream/weir/source"
)

// Env is a worker's Kafka for one job.
type Env struct {
	// Name is the job's name (--name): internal topics are named
	// "<Name>-<operator>-repartition".
	Name    string
	Brokers []string
	// Topics maps a topic name the job declares to the topic to use in
	// this environment (--topic NAME=TOPIC).
	Topics map[string]string
	// Input and Output, if set, are the topics of the job's only read and
	// only write (--input, --output); a job with several of either refuses
	// them, naming the setting.
	Input, Output string

	// SourceOpts are a task's source client options: client is the
	// operator that reads (its metrics label).
	SourceOpts func(task int, client string) []kgo.Opt
	// Consumers, if set, are the worker's shared consumers: every
	// source's readers fetch with one client per source (SourceOpts are
	// then not used; Consumers bring their own options).
	Consumers *source.Consumers
	// SinkOpts are the options of every sink's clients.
	SinkOpts []kgo.Opt
	// Partitioner places the records of repartitions: as the input's
	// producers place their keys (--partitioner).
	Partitioner kgo.Partitioner

	BatchSize     int
	Start         source.Start
	StartTime     time.Time
	OnDecodeError source.OnDecodeError
	DeadLetter    string
	LagGroup      string
	// DropUnreadPositions drops, with a warning, the checkpointed
	// positions of topics the job no longer reads
	// (--allow-non-restored-state); otherwise they fail the restore.
	DropUnreadPositions bool
	// CheckRecord refuses an input record over the worker's bounds; nil
	// checks nothing.
	CheckRecord func(*kgo.Record) error

	Delivery           sink.Delivery
	PoolSize           int
	TransactionTimeout time.Duration
	// FlushTarget bounds a sink's output in flight by time (the
	// checkpoint interval; see sink.Config.FlushTarget).
	FlushTarget time.Duration
	// InFlight bounds the records in flight of the exactly-once sinks of
	// the worker together (see sink.InFlightBudget); nil: no bound.
	InFlight       *sink.InFlightBudget
	Compression    string
	MaxRecordBytes int

	// In and Out count the records a task decoded from the job's inputs
	// and wrote to its outputs (the worker's totals are their sums: one
	// counter the tasks all added to per record was a cache line they
	// fought over); nil counts nothing.
	In, Out func(task int) *atomic.Int64
	// DeadLettered counts the records a task's sources dead-lettered for
	// not decoding; nil counts nothing.
	DeadLettered func(task int) *atomic.Int64
	// WriteError annotates an error of a sink's Write, PreCommit or Commit (a
	// record too large names the settings it runs into); nil leaves it.
	WriteError func(error) error

	// What the job declared, filled in as it builds.
	Inputs, Outputs, Internal []string
}

// Bind hands env to job, a *stream.Job; set by package stream.
var Bind func(job any, env *Env)

// Resolve is the topic to use for the job's topic name: an override, or
// the name itself.
func (e *Env) Resolve(topic string) string {
	if t, ok := e.Topics[topic]; ok {
		return t
	}
	return topic
}

// Registered is a job that registered itself (stream.Register): its name,
// and its build function over a *stream.Job.
type Registered struct {
	Name  string
	Build func(job any)
}

var (
	mu         sync.Mutex
	registered []Registered
)

// Register adds a job; a second job of one name is an error.
func Register(name string, build func(job any)) error {
	mu.Lock()
	defer mu.Unlock()
	for _, r := range registered {
		if r.Name == name {
			return fmt.Errorf("job %q is registered twice", name)
		}
	}
	registered = append(registered, Registered{Name: name, Build: build})
	return nil
}

// Jobs are the registered jobs, in the order they registered.
func Jobs() []Registered {
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(registered)
}
