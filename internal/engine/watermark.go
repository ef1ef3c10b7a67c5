package engine

import (
	"fmt"
	"math"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/state"
)

// Event time. Every record carries a timestamp (Position.Timestamp, Unix
// milliseconds). A source with a WatermarkStrategy derives watermarks from
// them: a watermark at t says that no more records with a timestamp at or
// before t are expected (those that still come are late). Watermarks travel
// in order with the records, through every operator: a keyed operator fires
// its event-time timers up to the watermark, an operator with several
// inputs passes on the least of its inputs' watermarks, a sink drops them.
//
// As in Flink, each split (Kafka partition) of a source has its own
// watermark: the highest timestamp seen minus the allowed out-of-orderness
// (and 1 ms). The source's watermark is the least over its splits, leaving
// out the idle ones, which have had no record for the strategy's idleness;
// when all are idle the source says so, and operators with several inputs
// leave it out. A split is judged idle when a poll returns, by the records
// that poll could return, not after the batch is processed: a batch that
// took long (a slow operator, backpressure) does not make a split idle
// whose records came in meanwhile and wait for the next poll. Watermarks
// never go
// back. A bounded source that ends sends the watermark at the end of time,
// which fires every event-time timer. A drained source (a graceful stop, a
// hand-off) does not: its windows are still open and go on at the next
// owner.
//
// The highest timestamp per split is part of each checkpoint (the source
// positions' MaxTimestamp), so a restored source resumes its watermark.

// WatermarkStrategy says how a source derives watermarks.
type WatermarkStrategy[T any] struct {
	// OutOfOrderness is how far behind the highest timestamp seen records
	// of a split may still come without being late.
	OutOfOrderness time.Duration
	// Idleness leaves a split out of the source's watermark once it has
	// had no record for this long, so that an empty partition does not
	// hold event time back; a split that never had a record counts from
	// the task's start. It is judged when a poll returns (see above). 0:
	// splits are never idle.
	Idleness time.Duration
	// Timestamp extracts a record's event time; nil keeps the source's
	// timestamp (for Kafka, the record's timestamp).
	Timestamp func(v T, p Position) time.Time
}

// Watermark is a watermark as sources and sinks exchange it with the
// runtime.
type Watermark struct {
	// Millis is in Unix ms: no record at or before it is expected.
	// math.MinInt64: none yet; math.MaxInt64: the input has ended.
	Millis int64
	// Idle: the input has no active split, and Millis is its last
	// watermark; operators with several inputs leave it out.
	Idle bool
}

// WatermarkWriter is a SinkWriter that takes the watermarks of its input,
// in order with its records: weir's repartition sink writes them into its
// topic, for the tasks downstream.
type WatermarkWriter interface {
	Watermark(w Watermark)
}

// WatermarkReader is a SourceReader whose splits carry their own
// watermarks in the stream (weir's repartition topics carry those of the
// tasks that wrote them). The runtime takes each split's watermark from
// it, after each poll, instead of deriving one from timestamps; a source
// of such a reader takes no WatermarkStrategy.
type WatermarkReader interface {
	// SplitWatermark returns the watermark of the split as of the
	// records Poll returned so far.
	SplitWatermark(topic string, partition int32) Watermark
}

// wmark is a watermark on the wire between operators.
type wmark struct {
	ts int64 // Unix ms: no record at or before ts is expected
	// idle: the input has no active split; ts is its last watermark, and
	// operators with several inputs leave this input out.
	idle bool
}

// endOfTime is the watermark of an input that has ended.
const endOfTime = math.MaxInt64

// noWatermark is the watermark before the first one.
const noWatermark = math.MinInt64

// eventTimerBias shifts event-time timers into the times state.Timers keep
// (after 1970): event times down to 1935 have timers, a record without a
// timestamp (Kafka's -1) among them.
const eventTimerBias = 1 << 40 // ms

// eventTimerAt is the timer time of event time ts.
func eventTimerAt(ts time.Time) time.Time { return ts.Add(eventTimerBias * time.Millisecond) }

// maxEventTimerMillis is the latest event time an event-time timer holds:
// timers keep Unix nanoseconds (up to 2262), less the bias (about 2227).
const maxEventTimerMillis = math.MaxInt64/int64(time.Millisecond) - eventTimerBias

// registerEventTimer registers the event-time timer of ts in timers. An
// event time past what timers hold is refused: its timer time would wrap
// around, and the timer fire at a time of no window's, or never.
func registerEventTimer(timers *state.Timers, ts time.Time) error {
	if ts.UnixMilli() > maxEventTimerMillis {
		return fmt.Errorf("event time %s is past %s, the latest an event-time timer holds (a timestamp in microseconds or nanoseconds taken for milliseconds?)",
			ts.UTC().Format(time.RFC3339Nano), time.UnixMilli(maxEventTimerMillis).UTC().Format(time.RFC3339))
	}
	return timers.Register(eventTimerAt(ts))
}

// eventTimeOf is the event time of timer time t.
func eventTimeOf(t time.Time) time.Time { return t.Add(-eventTimerBias * time.Millisecond) }

// eventTimerLimit is the timer time up to which timers are due at
// watermark wm.
func eventTimerLimit(wm int64) time.Time {
	if wm == endOfTime || wm > maxEventTimerMillis {
		// Past every timer there can be (wm + eventTimerBias would wrap).
		return time.Unix(0, math.MaxInt64)
	}
	return time.UnixMilli(wm + eventTimerBias)
}

// watermarkTime is ts as a time for timers: the end of time is the latest
// time there is.
func watermarkTime(ts int64) time.Time {
	if ts == endOfTime {
		return time.Unix(0, math.MaxInt64)
	}
	return time.UnixMilli(ts)
}

type splitKey struct {
	topic     string
	partition int32
}

type splitClock struct {
	max  int64     // highest timestamp seen
	seen bool      // any record (or a restored max)
	last time.Time // when the last record came (on the clock idleness counts on)
}

// watermarkGen keeps a source's watermark, per split.
type watermarkGen struct {
	bound  int64 // out-of-orderness, ms
	idle   time.Duration
	splits map[splitKey]*splitClock
	out    wmark // the last watermark sent
	sent   bool
	// carried, if set, gives each split's watermark: the splits carry
	// them (see WatermarkReader), and bound and idle are unused.
	carried WatermarkReader
}

func newWatermarkGen(outOfOrderness, idleness time.Duration, splits []checkpoint.SourcePosition, now time.Time) *watermarkGen {
	g := &watermarkGen{bound: outOfOrderness.Milliseconds(), idle: idleness, splits: map[splitKey]*splitClock{}, out: wmark{ts: noWatermark}}
	for _, p := range splits {
		c := &splitClock{last: now}
		if p.MaxTimestamp != nil {
			c.max, c.seen = *p.MaxTimestamp, true
		}
		g.splits[splitKey{p.Topic, p.Partition}] = c
	}
	return g
}

// observe takes one record's timestamp into its split.
func (g *watermarkGen) observe(p *Position, now time.Time) {
	k := splitKey{p.Topic, p.Partition}
	c := g.splits[k]
	if c == nil {
		c = &splitClock{}
		g.splits[k] = c
	}
	if !c.seen || p.Timestamp > c.max {
		c.max, c.seen = p.Timestamp, true
	}
	c.last = now
}

// advance returns the watermark to send, if it differs from the last one
// sent: higher, or idle where it was not (or the other way round).
func (g *watermarkGen) advance(now time.Time) (wmark, bool) {
	low, active := int64(endOfTime), false
	for k, c := range g.splits {
		if g.carried != nil {
			w := g.carried.SplitWatermark(k.topic, k.partition)
			if !w.Idle {
				active = true
				low = min(low, w.Millis)
			}
			continue
		}
		if g.idle > 0 && now.Sub(c.last) >= g.idle {
			continue
		}
		active = true
		w := int64(noWatermark)
		if c.seen {
			w = c.max - g.bound - 1
		}
		low = min(low, w)
	}
	next := wmark{ts: g.out.ts, idle: !active}
	if active && low > g.out.ts {
		next.ts = low
	}
	if g.sent && next == g.out || !g.sent && next.ts == noWatermark && !next.idle {
		return wmark{}, false
	}
	g.out, g.sent = next, true
	return next, true
}

// restored returns the restored watermark to send before the first
// records, if there is one and nothing was sent yet.
func (g *watermarkGen) restored() (wmark, bool) {
	if g.sent || g.out.ts == noWatermark {
		return wmark{}, false
	}
	g.sent = true
	return g.out, true
}

// annotate adds each split's highest timestamp to the checkpoint's
// positions.
func (g *watermarkGen) annotate(ps []checkpoint.SourcePosition) {
	for i := range ps {
		if c := g.splits[splitKey{ps[i].Topic, ps[i].Partition}]; c != nil && c.seen {
			m := c.max
			ps[i].MaxTimestamp = &m
		}
	}
}
