package stream

import (
	"github.com/weirstream/weir/runtime"
	"github.com/weirstream/weir/state"
)

// Job is a dataflow graph under construction.
type Job struct {
	g *runtime.Graph
}

// NewJob starts a job. Its name derives the consumer group, the
// transactional ids and the checkpoint path.
func NewJob(name string) *Job { return &Job{g: runtime.NewGraph(name)} }

// Name is the job's name.
func (j *Job) Name() string { return j.g.Name() }

// Build validates the graph and returns every error found, joined; only a
// valid plan runs.
func (j *Job) Build() (*runtime.Plan, error) { return j.g.Plan() }

// Stream is a typed stream of records.
type Stream[T any] struct {
	p *runtime.Port[T]
}

// KeyedStream is a stream with a key: keyed operators downstream see state
// scoped to each record's key.
type KeyedStream[K, T any] struct {
	k *runtime.Keyed[K, T]
}

// Aliases of the runtime's types that user functions see.
type (
	// Setup declares a keyed operator's state, once per task.
	Setup = runtime.Setup
	// Context is what a keyed function gets on each call.
	Context[K, Out any] = runtime.Context[K, Out]
	// Processor is a keyed operator's behaviour.
	Processor[K, In, Out any] = runtime.Processor[K, In, Out]
	// CoProcessor is a keyed two-input operator's behaviour.
	CoProcessor[K, In1, In2, Out any] = runtime.CoProcessor[K, In1, In2, Out]
	// Emitter passes the records of a FlatMap downstream.
	Emitter[T any] = runtime.Emitter[T]
)

// Source adds a source; factory opens its reader for each task.
func Source[T any](j *Job, name string, factory runtime.SourceFactory[T]) Stream[T] {
	return Stream[T]{p: runtime.Source(j.g, name, factory)}
}

// Map applies fn to every record.
func Map[In, Out any](s Stream[In], name string, fn func(In) (Out, error)) Stream[Out] {
	return Stream[Out]{p: runtime.Map(s.p, name, fn)}
}

// Filter keeps the records for which fn returns true.
func Filter[T any](s Stream[T], name string, fn func(T) (bool, error)) Stream[T] {
	return Stream[T]{p: runtime.Filter(s.p, name, fn)}
}

// FlatMap emits any number of records for each record.
func FlatMap[In, Out any](s Stream[In], name string, fn func(In, *Emitter[Out]) error) Stream[Out] {
	return Stream[Out]{p: runtime.FlatMap(s.p, name, fn)}
}

// KeyBy keys a stream by keyFn; codec encodes the key for state.
func KeyBy[K, T any](s Stream[T], name string, keyFn func(T) K, codec state.Codec[K]) KeyedStream[K, T] {
	return KeyedStream[K, T]{k: runtime.KeyBy(s.p, name, keyFn, codec)}
}

// Process adds a keyed operator. factory runs once per task: it declares
// state on the Setup and returns the functions that use it.
func Process[K, In, Out any](s KeyedStream[K, In], name string, factory func(*Setup) (Processor[K, In, Out], error)) Stream[Out] {
	return Stream[Out]{p: runtime.KeyedProcess(s.k, name, factory)}
}

// Union merges streams of one type; it aligns checkpoint barriers across
// its inputs.
func Union[T any](name string, first Stream[T], more ...Stream[T]) Stream[T] {
	ports := []*runtime.Port[T]{first.p}
	for _, s := range more {
		ports = append(ports, s.p)
	}
	return Stream[T]{p: runtime.Union(name, ports...)}
}

// CoProcess connects two streams keyed alike into one keyed operator whose
// state both inputs share; it aligns checkpoint barriers across them.
func CoProcess[K, In1, In2, Out any](a KeyedStream[K, In1], b KeyedStream[K, In2], name string, factory func(*Setup) (CoProcessor[K, In1, In2, Out], error)) Stream[Out] {
	return Stream[Out]{p: runtime.CoProcess(a.k, b.k, name, factory)}
}

// Sink adds a sink; factory opens its writer for each task.
func Sink[T any](s Stream[T], name string, factory runtime.SinkFactory[T]) {
	runtime.Sink(s.p, name, factory)
}

// ValueState declares a keyed value.
func ValueState[T any](s *Setup, name string, codec state.Codec[T]) (*state.Value[T], error) {
	return state.NewValue(s.Backend(), s.Scope(), name, codec)
}

// ListState declares a keyed list; Add does not read the list.
func ListState[T any](s *Setup, name string, codec state.Codec[T]) (*state.List[T], error) {
	return state.NewList(s.Backend(), s.Scope(), name, codec)
}

// MapState declares a keyed map.
func MapState[K, V any](s *Setup, name string, kc state.Codec[K], vc state.Codec[V]) (*state.Map[K, V], error) {
	return state.NewMap(s.Backend(), s.Scope(), name, kc, vc)
}
