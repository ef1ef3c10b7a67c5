// Package clicks is the event-time example job: clicks per user per minute,
// in tumbling windows of event time, from a topic of click events keyed by
// user. Its watermark allows clicks 5 seconds out of order; a minute's
// count is emitted once the watermark passes the minute, and again, updated,
// for each click up to 30 seconds later than that. Later clicks go to the
// late output, which the job writes to its --output topic too, marked late.
package clicks

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/stream"
)

// Click is one input record: a user's click at a time.
type Click struct {
	User string    `json:"user"`
	URL  string    `json:"url"`
	At   time.Time `json:"at"`
}

// Out is one output record: a minute's click count of a user (the latest,
// if the minute fired again for late clicks), or a click too late to count.
type Out struct {
	User   string    `json:"user"`
	Minute time.Time `json:"minute,omitzero"`
	Clicks int64     `json:"clicks,omitempty"`
	Late   *Click    `json:"late,omitempty"`
}

// Settings of the job's event time.
const (
	OutOfOrderness  = 5 * time.Second
	AllowedLateness = 30 * time.Second
	Idleness        = time.Minute
)

// Operator names (they key the job's state in checkpoints).
const (
	SourceName = "clicks"
	KeyByName  = "by-user"
	WindowName = "clicks-per-minute"
	LateName   = "late-clicks"
	SinkName   = "output"
)

// Decode reads a click: a JSON value whose user is the record key's.
func Decode(r *kgo.Record) (Click, error) {
	var c Click
	if err := json.Unmarshal(r.Value, &c); err != nil {
		return Click{}, fmt.Errorf("clicks: value is not a click: %w", err)
	}
	if c.User == "" || string(r.Key) != c.User {
		return Click{}, errors.New("clicks: record key is not the click's user")
	}
	if c.At.IsZero() {
		return Click{}, errors.New("clicks: click has no time")
	}
	return c, nil
}

// Encode writes o as JSON, keyed by user.
func Encode(o Out) (*kgo.Record, error) {
	v, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	return &kgo.Record{Key: []byte(o.User), Value: v}, nil
}

// Topics the job reads and writes, by default (--input and --output point
// them elsewhere).
const (
	InputTopic  = "clicks"
	OutputTopic = "clicks-per-minute"
)

// EventTime is the clicks' event time: their times, OutOfOrderness late
// at most.
var EventTime = stream.Watermarks[Click]{
	OutOfOrderness: OutOfOrderness,
	Idleness:       Idleness,
	Timestamp:      func(c Click, _ stream.Position) time.Time { return c.At },
}

func init() { stream.Register("clicks", Build) }

// Build is the clicks job: InputTopic, with event time -> PerMinute ->
// OutputTopic.
func Build(job *stream.Job) {
	clicks := stream.ReadWithWatermarks(job, SourceName, InputTopic, Decode, EventTime)
	stream.Write(PerMinute(clicks), SinkName, OutputTopic, Encode)
}

// PerMinute is the graph: clicks keyed by user (the record key: no move)
// -> counted in tumbling minutes; late clicks -> out as they come.
func PerMinute(clicks stream.Stream[Click]) stream.Stream[Out] {
	perUser := stream.KeyByPartitioned(clicks, KeyByName, func(c Click) string { return c.User }, state.String())
	minutes := stream.Aggregate(perUser, WindowName, stream.Tumbling(time.Minute),
		stream.WindowOptions{AllowedLateness: AllowedLateness}, state.Int64(),
		func(n int64, _ Click) int64 { return n + 1 },
		func(a, b int64) int64 { return a + b },
		func(user string, w stream.Window, n int64) (Out, error) {
			return Out{User: user, Minute: w.Start.UTC(), Clicks: n}, nil
		})
	late := stream.Map(minutes.Late, LateName, func(c Click) (Out, error) { return Out{User: c.User, Late: &c}, nil })
	return stream.Union("results", minutes.Results, late)
}
