package nexmark

import (
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/stream"
)

// Q0 is the passthrough: every bid, as it is. It measures the cost of
// reading, decoding, encoding and writing.
func Q0(ev stream.Stream[Event]) stream.Stream[Bid] { return bids(ev, "q0-bids") }

// Q1 is currency conversion: every bid with its price in euros, at 0.908
// euros to the dollar, rounded down to the cent.
func Q1(ev stream.Stream[Event]) stream.Stream[Bid] {
	return stream.Map(bids(ev, "q1-bids"), "q1-euros", func(b Bid) (Bid, error) {
		b.Price = Euros(b.Price)
		return b, nil
	})
}

// Euros converts a price in dollar cents to euro cents, as q1 does.
func Euros(cents int64) int64 { return cents * 908 / 1000 }

// EncodeBid writes a bid of q0 or q1 as JSON, keyed by its auction.
func EncodeBid(b Bid) (*kgo.Record, error) {
	// Key and value in one allocation.
	buf := make([]byte, 0, 20+len(b.Channel)+len(b.URL)+len(b.Extra)*9/8+150)
	key := strconv.AppendInt(buf, b.Auction, 10)
	value := appendBidJSON(key[len(key):], b)
	return &kgo.Record{Key: key[:len(key):len(key)], Value: value}, nil
}

// Q2Out is a result of q2: a bid's auction and price.
type Q2Out struct {
	Auction int64 `json:"auction"`
	Price   int64 `json:"price"`
}

// Q2Modulus selects q2's auctions: those whose id it divides.
const Q2Modulus = 123

// Q2 is selection: the auction and price of the bids on every 123rd
// auction.
func Q2(ev stream.Stream[Event]) stream.Stream[Q2Out] {
	return stream.FlatMap(ev, "q2-select", func(e Event, out *stream.Emitter[Q2Out]) error {
		if e.Bid == nil || e.Bid.Auction%Q2Modulus != 0 {
			return nil
		}
		return out.Emit(Q2Out{Auction: e.Bid.Auction, Price: e.Bid.Price})
	})
}

// EncodeQ2 writes a result of q2, keyed by its auction.
func EncodeQ2(o Q2Out) (*kgo.Record, error) { return encodeJSON(o.Auction, o) }
