package nexmark

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/stream"
)

// Q5's sliding windows.
const (
	Q5Size  = 10 * time.Second
	Q5Slide = 2 * time.Second
)

// Q5Out is a result of q5: an auction with the most bids of a window
// [Start, End), and how many (Num). A window has several if they tie. A
// result marked Late is one auction's count that reached the second stage
// after the window was decided: its upstream task's input was idle past
// the source's idleness, and came back. A bid late in the input (behind
// the first stage's watermark) is dropped, as in Flink's Nexmark, and
// counted in weir_late_records_dropped_total (operator q5-count).
type Q5Out struct {
	Auction int64     `json:"auction"`
	Num     int64     `json:"num"`
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`
	Late    bool      `json:"late,omitempty"`
}

// EncodeQ5 writes a result of q5, keyed by its auction.
func EncodeQ5(o Q5Out) (*kgo.Record, error) { return encodeJSON(o.Auction, o) }

// bidCount is an auction's count of bids in the window that ends at End
// (Unix ms).
type bidCount struct{ Auction, Count, End int64 }

func (c bidCount) out(late bool) Q5Out {
	end := time.UnixMilli(c.End).UTC()
	return Q5Out{Auction: c.Auction, Num: c.Count, Start: end.Add(-Q5Size), End: end, Late: late}
}

// Q5 is hot items: in sliding windows of 10 s every 2 s, the auctions with
// the most bids. The first stage counts each auction's bids per window
// (bids are keyed by their auction); the second, keyed by window, takes
// the most.
//
// The second stage must see every count of a window: the counts move to
// the task of their window (KeyBy), with their event time.
func Q5(ev stream.Stream[Event]) stream.Stream[Q5Out] {
	// Bids are keyed by their auction in the input, as decimal text:
	// idCodec makes the state key those bytes, so that the worker's check
	// of the keying hashes what the producer hashed: no move.
	byAuction := stream.KeyByPartitioned(bids(ev, "q5-bids"), "q5-auction", func(b Bid) int64 { return b.Auction }, idCodec{})
	counts := stream.Aggregate(byAuction, "q5-count", stream.Sliding(Q5Size, Q5Slide), stream.WindowOptions{}, state.Int64(),
		func(n int64, _ Bid) int64 { return n + 1 },
		func(a, b int64) int64 { return a + b },
		func(auction int64, w stream.Window, n int64) (bidCount, error) {
			return bidCount{Auction: auction, Count: n, End: w.End.UnixMilli()}, nil
		})
	// A window's counts carry its event time, End-1: in a window of the
	// slide, [End-slide, End), one per key.
	byWindow := stream.KeyBy(counts.Results, "q5-by-window", func(c bidCount) int64 { return c.End }, idCodec{}, bidCountCodec{})
	hottest := stream.Apply(byWindow, "q5-hottest", stream.Tumbling(Q5Slide), stream.WindowOptions{}, state.Codec[bidCount](bidCountCodec{}),
		func(_ int64, _ stream.Window, counts []bidCount, out *stream.Emitter[Q5Out]) error {
			var most int64
			for _, c := range counts {
				most = max(most, c.Count)
			}
			for _, c := range counts {
				if c.Count == most {
					if err := out.Emit(c.out(false)); err != nil {
						return err
					}
				}
			}
			return nil
		})
	late := stream.Map(hottest.Late, "q5-late", func(c bidCount) (Q5Out, error) { return c.out(true), nil })
	return stream.Union("q5-results", hottest.Results, late)
}

type bidCountCodec struct{}

func (bidCountCodec) Append(b []byte, c bidCount) []byte {
	return appendInt(appendInt(appendInt(b, c.Auction), c.Count), c.End)
}

func (bidCountCodec) Decode(b []byte) (bidCount, error) {
	r := reader{b: b}
	c := bidCount{Auction: r.int(), Count: r.int(), End: r.int()}
	return c, r.end("q5 count")
}
