package nexmark

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
)

// An event's Kafka record is keyed by Event.Key in decimal; its value is
// JSON with the kind in "type" and the event under the kind's name, as
// Nexmark's Kafka topics hold them (Flink's has an event_type number and
// the three rows, two of them null):
//
//	{"type":"bid","bid":{"auction":1000,"bidder":1001,"price":32530001,...}}
//
// The values are written and read by hand (fastjson.go), byte for byte as
// encoding/json would; values of another shape are read by encoding/json.

// wireEvent is an event's JSON value.
type wireEvent struct {
	Type    string   `json:"type"`
	Person  *Person  `json:"person,omitempty"`
	Auction *Auction `json:"auction,omitempty"`
	Bid     *Bid     `json:"bid,omitempty"`
}

// MarshalJSON writes e as its record value.
func (e Event) MarshalJSON() ([]byte, error) { return appendEvent(nil, e) }

// UnmarshalJSON reads a record value; its type must name its one event.
func (e *Event) UnmarshalJSON(b []byte) error {
	ev, err := parseEvent(b)
	if err != nil {
		if ev, err = unmarshalWire(b); err != nil {
			return err
		}
	}
	*e = ev
	return nil
}

// unmarshalWire reads a record value with encoding/json.
func unmarshalWire(b []byte) (Event, error) {
	var w wireEvent
	if err := json.Unmarshal(b, &w); err != nil {
		return Event{}, err
	}
	e := Event{Person: w.Person, Auction: w.Auction, Bid: w.Bid}
	if k := e.Kind(); k == 0 || k.String() != w.Type {
		return Event{}, fmt.Errorf("nexmark: event of type %q does not have exactly that one of person, auction and bid", w.Type)
	}
	return e, nil
}

// Encode makes e's Kafka record.
func Encode(e Event) (*kgo.Record, error) {
	v, err := appendEvent(make([]byte, 0, jsonSize(e)), e)
	if err != nil {
		return nil, err
	}
	return &kgo.Record{Key: strconv.AppendInt(nil, e.Key(), 10), Value: v, Timestamp: e.Time()}, nil
}

// jsonSize is about the length of e's JSON value, to allocate it at once:
// its strings (some escaped: 1/8 more), and 200 bytes of names, numbers
// and times.
func jsonSize(e Event) int {
	n := 0
	switch e.Kind() {
	case KindPerson:
		p := e.Person
		n = len(p.Name) + len(p.EmailAddress) + len(p.CreditCard) + len(p.City) + len(p.State) + len(p.Extra)
	case KindAuction:
		n = len(e.Auction.ItemName) + len(e.Auction.Description) + len(e.Auction.Extra)
	case KindBid:
		n = len(e.Bid.Channel) + len(e.Bid.URL) + len(e.Bid.Extra)
	}
	return n + n/8 + 200
}

// Decode reads an event from its Kafka record, whose key must be the
// event's.
func Decode(r *kgo.Record) (Event, error) {
	e, err := parseEvent(r.Value)
	if err != nil {
		if e, err = unmarshalWire(r.Value); err != nil {
			return Event{}, fmt.Errorf("nexmark: value is not an event: %w", err)
		}
	}
	var buf [20]byte
	if want := strconv.AppendInt(buf[:0], e.Key(), 10); !bytes.Equal(r.Key, want) {
		return Event{}, fmt.Errorf("nexmark: record key %q is not the %s's %s", r.Key, e.Kind(), want)
	}
	return e, nil
}

// encodeJSON makes a query's output record: key in decimal, v as JSON.
func encodeJSON[T any](key int64, v T) (*kgo.Record, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return &kgo.Record{Key: strconv.AppendInt(nil, key, 10), Value: b}, nil
}
