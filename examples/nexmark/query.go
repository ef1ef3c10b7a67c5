package nexmark

import (
	"strconv"
	"time"

	"github.com/weirstream/weir/stream"
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

// EventTime is the event time of the Nexmark stream: each event's time,
// with watermarks OutOfOrderness behind the newest. A source of events
// declares it (stream.ReadWithWatermarks, stream.SourceWithWatermarks) for
// the queries' windows to fire.
var EventTime = stream.Watermarks[Event]{
	OutOfOrderness: OutOfOrderness,
	Idleness:       Idleness,
	Timestamp:      func(e Event, _ stream.Position) time.Time { return e.Time() },
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

// idCodec encodes an id as decimal text, as Encode keys the input's
// records: a record repartitioned by an id goes to the partition (and
// task) of the input's records of that id, so a person and the auctions
// moved by their seller meet. Keyed state is keyed by it on both sides of
// a join, so that both sides' keys match.
type idCodec struct{}

func (idCodec) Append(b []byte, id int64) []byte { return strconv.AppendInt(b, id, 10) }

func (idCodec) Decode(b []byte) (int64, error) { return strconv.ParseInt(string(b), 10, 64) }

// EventsTopic is the topic the jobs read by default (--input points them
// elsewhere). Job nexmark-<q> writes "nexmark-<q>-out" (--output).
const EventsTopic = "nexmark-events"

// The queries as jobs for `processor run`: nexmark-q0, -q1, -q2, -q3, -q5,
// -q7 and -q8. Each reads the events (records as Encode makes them,
// partitioned by key with Kafka's default partitioner) and writes its
// results; q3, q5, q7 and q8 repartition through internal topics.
func init() {
	register("q0", Q0, EncodeBid)
	register("q1", Q1, EncodeBid)
	register("q2", Q2, EncodeQ2)
	register("q3", Q3, EncodeQ3)
	register("q5", Q5, EncodeQ5)
	register("q7", Q7, EncodeQ7)
	register("q8", Q8, EncodeQ8)
}

// register registers query q as job nexmark-q: EventsTopic -> query ->
// nexmark-q-out.
func register[T any](q string, query func(stream.Stream[Event]) stream.Stream[T], encode stream.Encoder[T]) {
	name := "nexmark-" + q
	stream.Register(name, func(job *stream.Job) {
		ev := stream.ReadWithWatermarks(job, "events", EventsTopic, Decode, EventTime)
		stream.Write(query(ev), "output", name+"-out", encode)
	})
}
