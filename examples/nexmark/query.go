package nexmark

import (
	"strconv"
	"time"

	"github.com/weirstream/weir/runtime"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/worker"
)

// Event time settings of the queries.
const (
	// OutOfOrderness is how far behind the newest event of a partition an
	// event may come (Flink's Nexmark: WATERMARK FOR dateTime AS
	// dateTime - INTERVAL '4' SECOND). The generator's events are in order.
	OutOfOrderness = 4 * time.Second
	// Idleness leaves a partition with no record for this long out of
	// event time.
	Idleness = time.Minute
)

// events adds the source of the Nexmark stream, its event time from each
// event's time.
func events(job *stream.Job, src runtime.SourceFactory[Event]) stream.Stream[Event] {
	return stream.SourceWithWatermarks(job, "events", src, stream.Watermarks[Event]{
		OutOfOrderness: OutOfOrderness,
		Idleness:       Idleness,
		Timestamp:      func(e Event, _ stream.Position) time.Time { return e.Time() },
	})
}

// bids is the bids of the stream.
func bids(ev stream.Stream[Event], name string) stream.Stream[Bid] {
	return stream.FlatMap(ev, name, func(e Event, out *stream.Emitter[Bid]) error {
		if e.Bid == nil {
			return nil
		}
		return out.Emit(*e.Bid)
	})
}

// rekey keys s by key, moving its records to the task that owns the key.
// op names the move; event time goes on across it.
type rekey[T any] func(s stream.Stream[T], op string, key func(T) int64, codec state.Codec[T]) stream.KeyedStream[int64, T]

// local is the rekey of a graph run by runtime.Run with one task: every
// key is that task's already, and watermarks flow on.
func local[T any](s stream.Stream[T], op string, key func(T) int64, _ state.Codec[T]) stream.KeyedStream[int64, T] {
	return stream.KeyBy(s, op, key, idCodec{})
}

// repartition is the rekey of a worker job: through an internal topic.
func repartition[T any](w *worker.Wiring, job *stream.Job) rekey[T] {
	return func(s stream.Stream[T], op string, key func(T) int64, codec state.Codec[T]) stream.KeyedStream[int64, T] {
		return worker.Repartition(w, job, s, op, key, idCodec{}, codec)
	}
}

// idCodec encodes an id as decimal text, as Encode keys the input's
// records: a record repartitioned by an id goes to the partition (and
// task) of the input's records of that id, so a person and the auctions
// moved by their seller meet. Keyed state is keyed by it on both sides of
// a join, so that both sides' keys match.
type idCodec struct{}

func (idCodec) Append(b []byte, id int64) []byte { return strconv.AppendInt(b, id, 10) }

func (idCodec) Decode(b []byte) (int64, error) { return strconv.ParseInt(string(b), 10, 64) }

// Jobs are the queries as jobs for `processor run`: nexmark-q0, -q1, -q2,
// -q3, -q5, -q7 and -q8. Each reads the events from --input (records as
// Encode makes them, partitioned by key with Kafka's default partitioner)
// and writes its results to --output; q3, q5, q7 and q8 repartition
// through internal topics.
func Jobs() []worker.Job {
	return []worker.Job{
		worker.Pipeline("nexmark-q0", Decode, EncodeBid, Q0),
		worker.Pipeline("nexmark-q1", Decode, EncodeBid, Q1),
		worker.Pipeline("nexmark-q2", Decode, EncodeQ2, Q2),
		worker.NewJob("nexmark-q3", func(w *worker.Wiring, job *stream.Job) error {
			buildQ3(job, worker.Source(w, Decode), worker.Sink(w, EncodeQ3), repartition[q3Auction](w, job))
			return nil
		}),
		worker.NewJob("nexmark-q5", func(w *worker.Wiring, job *stream.Job) error {
			buildQ5(job, worker.Source(w, Decode), worker.Sink(w, EncodeQ5), repartition[bidCount](w, job))
			return nil
		}),
		worker.NewJob("nexmark-q7", func(w *worker.Wiring, job *stream.Job) error {
			buildQ7(job, worker.Source(w, Decode), worker.Sink(w, EncodeQ7), repartition[topBids](w, job))
			return nil
		}),
		worker.NewJob("nexmark-q8", func(w *worker.Wiring, job *stream.Job) error {
			buildQ8(job, worker.Source(w, Decode), worker.Sink(w, EncodeQ8), repartition[q8Auction](w, job))
			return nil
		}),
	}
}
