package stream

import (
	"time"

	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/internal/jobenv"
	"github.com/weirstream/weir/state"
)

// Job is a dataflow graph under construction.
type Job struct {
	g *engine.Graph
	// env is the worker's Kafka (Bind), nil in a test over slices.
	env *jobenv.Env
	// reads and writes are the job's Kafka topics, resolved by Build.
	reads  []*read
	writes []*write
}

// NewJob starts a job. Its name derives the consumer group, the
// transactional ids and the checkpoint path.
func NewJob(name string) *Job { return &Job{g: engine.NewGraph(name)} }

// Name is the job's name.
func (j *Job) Name() string { return j.g.Name() }

// Build validates the graph and returns every error found, joined; only a
// valid plan runs.
func (j *Job) Build() (*Plan, error) {
	j.resolve()
	return j.g.Plan()
}

// Stream is a typed stream of records.
type Stream[T any] struct {
	j *Job
	p *engine.Port[T]
}

// KeyedStream is a stream with a key: keyed operators downstream see state
// scoped to each record's key.
type KeyedStream[K, T any] struct {
	j *Job
	k *engine.Keyed[K, T]
}

// Aliases of the runtime's types that user functions see.
type (
	// Setup declares a keyed operator's state, once per task.
	Setup = engine.Setup
	// Context is what a keyed function gets on each call.
	Context[K, Out any] = engine.Context[K, Out]
	// Processor is a keyed operator's behaviour.
	Processor[K, In, Out any] = engine.Processor[K, In, Out]
	// CoProcessor is a keyed two-input operator's behaviour.
	CoProcessor[K, In1, In2, Out any] = engine.CoProcessor[K, In1, In2, Out]
	// Emitter passes the records of a FlatMap downstream.
	Emitter[T any] = engine.Emitter[T]
	// Watermarks is how a source derives event time's watermarks.
	Watermarks[T any] = engine.WatermarkStrategy[T]
	// Position is where a record came from, and its event time.
	Position = engine.Position
	// Window is a window of event time, [Start, End).
	Window = engine.Window
	// WindowAssigner says which windows a record belongs to.
	WindowAssigner = engine.WindowAssigner
	// WindowOptions are a window operator's settings.
	WindowOptions = engine.WindowOptions
)

// Timed is a record with its event time (WithEventTime).
type Timed[T any] = engine.Timed[T]

// WithEventTime pairs each record with its event time, for code that does
// not see the record's position (a sink encoder).
func WithEventTime[T any](s Stream[T], name string) Stream[Timed[T]] {
	return Stream[Timed[T]]{j: s.j, p: engine.WithEventTime(s.p, name)}
}

// Tumbling windows of size, one after the other: each record is in one.
func Tumbling(size time.Duration) WindowAssigner { return engine.TumblingWindows(size) }

// Sliding windows of size starting every slide (size a multiple of slide).
func Sliding(size, slide time.Duration) WindowAssigner { return engine.SlidingWindows(size, slide) }

// Session windows: a key's records at most gap apart, merged.
func Session(gap time.Duration) WindowAssigner { return engine.SessionWindows(gap) }

// Windowed is the output of a window operator: its results, and the
// records that came after the allowed lateness of every window they
// belong to (Flink's late side output). Either may be left unused.
type Windowed[Out, In any] struct {
	Results Stream[Out]
	Late    Stream[In]
}

func windowed[Out, In any](j *Job) func(out *engine.Port[Out], late *engine.Port[In]) Windowed[Out, In] {
	return func(out *engine.Port[Out], late *engine.Port[In]) Windowed[Out, In] {
		return Windowed[Out, In]{Results: Stream[Out]{j: j, p: out}, Late: Stream[In]{j: j, p: late}}
	}
}

// Aggregate windows a keyed stream and aggregates each window
// incrementally: add folds a record into the window's accumulator (the
// zero Acc to start), merge joins two (session windows need it), result
// makes the output when the window fires, once the watermark passes its
// end.
func Aggregate[K, In, Acc, Out any](s KeyedStream[K, In], name string, w WindowAssigner, opts WindowOptions, acc state.Codec[Acc],
	add func(acc Acc, v In) Acc, merge func(a, b Acc) Acc, result func(key K, w Window, acc Acc) (Out, error)) Windowed[Out, In] {
	return windowed[Out, In](s.j)(engine.WindowAggregate(s.k, name, w, opts, acc, add, merge, result))
}

// Reduce windows a keyed stream and combines each window's records with
// reduce (associative), then makes the output with result.
func Reduce[K, In, Out any](s KeyedStream[K, In], name string, w WindowAssigner, opts WindowOptions, codec state.Codec[In],
	reduce func(a, b In) In, result func(key K, w Window, v In) (Out, error)) Windowed[Out, In] {
	return windowed[Out, In](s.j)(engine.WindowReduce(s.k, name, w, opts, codec, reduce, result))
}

// Apply windows a keyed stream and calls fn with all of a window's records
// when it fires (a full-window function: the records are kept, appended
// without reading the window back).
func Apply[K, In, Out any](s KeyedStream[K, In], name string, w WindowAssigner, opts WindowOptions, codec state.Codec[In],
	fn func(key K, w Window, items []In, out *Emitter[Out]) error) Windowed[Out, In] {
	return windowed[Out, In](s.j)(engine.WindowApply(s.k, name, w, opts, codec, fn))
}

// Source adds a source; factory opens its reader for each task.
func Source[T any](j *Job, name string, factory SourceFactory[T]) Stream[T] {
	return Stream[T]{j: j, p: engine.Source(j.g, name, factory)}
}

// SourceWithWatermarks adds a source whose records' timestamps drive event
// time: watermarks derived as w says reach every operator downstream and
// fire their event-time timers.
func SourceWithWatermarks[T any](j *Job, name string, factory SourceFactory[T], w Watermarks[T]) Stream[T] {
	return Stream[T]{j: j, p: engine.SourceWithWatermarks(j.g, name, factory, &w)}
}

// Map applies fn to every record.
func Map[In, Out any](s Stream[In], name string, fn func(In) (Out, error)) Stream[Out] {
	return Stream[Out]{j: s.j, p: engine.Map(s.p, name, fn)}
}

// Filter keeps the records for which fn returns true.
func Filter[T any](s Stream[T], name string, fn func(T) (bool, error)) Stream[T] {
	return Stream[T]{j: s.j, p: engine.Filter(s.p, name, fn)}
}

// FlatMap emits any number of records for each record.
func FlatMap[In, Out any](s Stream[In], name string, fn func(In, *Emitter[Out]) error) Stream[Out] {
	return Stream[Out]{j: s.j, p: engine.FlatMap(s.p, name, fn)}
}

// KeyByPartitioned keys a stream by keyFn without moving a record: it
// declares that the input is already partitioned by the key, as it is when
// the key is the Kafka record key (or a field the input's producers keyed
// by) and codec encodes it as they did. Kafka Streams calls this
// groupByKey, Flink reinterpretAsKeyedStream. A worker checks it on every
// record: a record whose key belongs to another task is a bad record
// (dead-lettered or failing the task), never partial state. To key by
// anything else, use KeyBy, which moves the records.
func KeyByPartitioned[K, T any](s Stream[T], name string, keyFn func(T) K, codec state.Codec[K]) KeyedStream[K, T] {
	return KeyedStream[K, T]{j: s.j, k: engine.KeyBy(s.p, name, keyFn, codec)}
}

// LocalKeyBy keys a stream within each task, whatever the input's
// partitioning, and is not checked: state is per key per task, and the
// same key in two tasks is two states. It is for state that is partial on
// purpose, as a pre-aggregation per task before a repartition.
func LocalKeyBy[K, T any](s Stream[T], name string, keyFn func(T) K, codec state.Codec[K]) KeyedStream[K, T] {
	return KeyedStream[K, T]{j: s.j, k: engine.LocalKeyBy(s.p, name, keyFn, codec)}
}

// Process adds a keyed operator. factory runs once per task: it declares
// state on the Setup and returns the functions that use it.
func Process[K, In, Out any](s KeyedStream[K, In], name string, factory func(*Setup) (Processor[K, In, Out], error)) Stream[Out] {
	return Stream[Out]{j: s.j, p: engine.KeyedProcess(s.k, name, factory)}
}

// Union merges streams of one type; it aligns checkpoint barriers across
// its inputs.
func Union[T any](name string, first Stream[T], more ...Stream[T]) Stream[T] {
	ports := []*engine.Port[T]{first.p}
	for _, s := range more {
		ports = append(ports, s.p)
	}
	return Stream[T]{j: first.j, p: engine.Union(name, ports...)}
}

// CoProcess connects two streams keyed alike into one keyed operator whose
// state both inputs share; it aligns checkpoint barriers across them.
func CoProcess[K, In1, In2, Out any](a KeyedStream[K, In1], b KeyedStream[K, In2], name string, factory func(*Setup) (CoProcessor[K, In1, In2, Out], error)) Stream[Out] {
	return Stream[Out]{j: a.j, p: engine.CoProcess(a.k, b.k, name, factory)}
}

// Sink adds a sink; it opens a writer for each task.
func Sink[T any](s Stream[T], name string, sink SinkOpener[T]) {
	engine.Sink(s.p, name, sink)
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
