package nexmark

import (
	"reflect"
	"testing"
	"time"

	"github.com/weirstream/weir/state"
)

func roundTrip[T any](t *testing.T, what string, c state.Codec[T], v T) {
	t.Helper()
	b := c.Append([]byte("prefix"), v)[len("prefix"):]
	got, err := c.Decode(b)
	if err != nil || !reflect.DeepEqual(got, v) {
		t.Errorf("%s: %+v came back as %+v, %v", what, v, got, err)
	}
	for n := range len(b) {
		if _, err := c.Decode(b[:n]); err == nil {
			t.Errorf("%s: %d of %d bytes decoded", what, n, len(b))
		}
	}
	if _, err := c.Decode(append(b, 0)); err == nil {
		t.Errorf("%s: decoded with a byte left over", what)
	}
}

// TestBinaryCodecs: the state and repartition records decode to what was
// encoded, and truncated or padded bytes fail to.
func TestBinaryCodecs(t *testing.T) {
	at := time.UnixMilli(1767225600123).UTC()
	bid := Bid{Auction: 1000, Bidder: -1, Price: 1 << 40, Channel: "Google", URL: "https://x/", DateTime: at, Extra: "é"}
	roundTrip(t, "q3 person", state.Codec[q3Person](q3PersonCodec{}), q3Person{ID: 1001, Name: "Kate Smith", City: "Bend", State: "OR"})
	roundTrip(t, "q3 auction", state.Codec[q3Auction](q3AuctionCodec{}), q3Auction{ID: 1200, Seller: 1001})
	roundTrip(t, "q5 count", state.Codec[bidCount](bidCountCodec{}), bidCount{Auction: 1100, Count: 300, End: at.UnixMilli()})
	roundTrip(t, "q7 highest", state.Codec[topBids](topBidsCodec{}), topBids{End: 10_000, Price: bid.Price, Bids: []Bid{bid, bid}})
	roundTrip(t, "q8 person", state.Codec[q8Person](q8PersonCodec{}), q8Person{ID: 1, Name: ""})
	roundTrip(t, "q8 auction", state.Codec[q8Auction](q8AuctionCodec{}), q8Auction{Seller: 1099})
}
