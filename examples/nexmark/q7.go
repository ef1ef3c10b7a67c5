package nexmark

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/stream"
)

// Q7Window is q7's tumbling window.
const Q7Window = 10 * time.Second

// Q7Out is a result of q7: a bid with the highest price of the window
// [Start, End) (several if they tie). A result marked Late is from a task's
// highest bids that reached the second stage after the window was decided:
// the task's input was idle past the source's idleness, and came back. A
// bid late in the input (behind the first stage's watermark) is dropped,
// as in Flink's Nexmark, and counted in weir_late_records_dropped_total
// (operator q7-task-max).
type Q7Out struct {
	Auction  int64     `json:"auction"`
	Bidder   int64     `json:"bidder"`
	Price    int64     `json:"price"`
	DateTime time.Time `json:"dateTime"`
	Extra    string    `json:"extra"`
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	Late     bool      `json:"late,omitempty"`
}

// EncodeQ7 writes a result of q7, keyed by its auction.
func EncodeQ7(o Q7Out) (*kgo.Record, error) { return encodeJSON(o.Auction, o) }

// topBids are the bids at the highest price seen, of the window that ends
// at End (Unix ms).
type topBids struct {
	End, Price int64
	Bids       []Bid
}

func (t topBids) add(b Bid) topBids {
	switch {
	case len(t.Bids) == 0 || b.Price > t.Price:
		t.Price, t.Bids = b.Price, []Bid{b}
	case b.Price == t.Price:
		t.Bids = append(t.Bids, b)
	}
	return t
}

func (t topBids) merge(o topBids) topBids {
	for _, b := range o.Bids {
		t = t.add(b)
	}
	return t
}

func (t topBids) emit(late bool, out *stream.Emitter[Q7Out]) error {
	end := time.UnixMilli(t.End).UTC()
	for _, b := range t.Bids {
		o := Q7Out{Auction: b.Auction, Bidder: b.Bidder, Price: b.Price, DateTime: b.DateTime, Extra: b.Extra, Start: end.Add(-Q7Window), End: end, Late: late}
		if err := out.Emit(o); err != nil {
			return err
		}
	}
	return nil
}

// Q7 is the highest bid: in tumbling windows of 10 s, the bids with the
// highest price. Each task first takes the highest of its own bids per
// window; a second stage, keyed by window, the highest of those.
//
// The tasks' highest bids move to the task of their window (KeyBy), with
// their event time.
func Q7(ev stream.Stream[Event]) stream.Stream[Q7Out] {
	// One key per task: the first stage is each task's own, partial on
	// purpose (a pre-aggregation before the repartition by window).
	perTask := stream.LocalKeyBy(bids(ev, "q7-bids"), "q7-task", func(Bid) int64 { return 0 }, state.Int64())
	partial := stream.Aggregate(perTask, "q7-task-max", stream.Tumbling(Q7Window), stream.WindowOptions{}, state.Codec[topBids](topBidsCodec{}),
		topBids.add, topBids.merge,
		func(_ int64, w stream.Window, t topBids) (topBids, error) {
			t.End = w.End.UnixMilli()
			return t, nil
		})
	byWindow := stream.KeyBy(partial.Results, "q7-by-window", func(t topBids) int64 { return t.End }, idCodec{}, topBidsCodec{})
	highest := stream.Apply(byWindow, "q7-max", stream.Tumbling(Q7Window), stream.WindowOptions{}, state.Codec[topBids](topBidsCodec{}),
		func(end int64, _ stream.Window, parts []topBids, out *stream.Emitter[Q7Out]) error {
			all := topBids{End: end}
			for _, p := range parts {
				all = all.merge(p)
			}
			return all.emit(false, out)
		})
	late := stream.FlatMap(highest.Late, "q7-late", func(t topBids, out *stream.Emitter[Q7Out]) error { return t.emit(true, out) })
	return stream.Union("q7-results", highest.Results, late)
}

type topBidsCodec struct{}

func (topBidsCodec) Append(b []byte, t topBids) []byte {
	b = appendInt(b, t.End)
	b = appendInt(b, t.Price)
	b = appendInt(b, int64(len(t.Bids)))
	for _, bid := range t.Bids {
		b = appendBid(b, bid)
	}
	return b
}

func (topBidsCodec) Decode(b []byte) (topBids, error) {
	r := reader{b: b}
	t := topBids{End: r.int(), Price: r.int()}
	n := r.int()
	if r.err == nil && (n < 0 || n > int64(len(r.b))) { // a bid takes bytes
		r.err = fmt.Errorf("%d bids in %d bytes", n, len(r.b))
	}
	for i := int64(0); i < n && r.err == nil; i++ {
		t.Bids = append(t.Bids, r.bid())
	}
	return t, r.end("q7 highest bids")
}
