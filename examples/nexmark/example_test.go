package nexmark_test

import (
	"fmt"
	"time"

	"github.com/weirstream/weir/examples/nexmark"
)

// The stream starts with a person, three auctions and 46 bids, and so on
// every 50 events; event n is the same in every run.
func ExampleGenerator() {
	g, err := nexmark.NewGenerator(nexmark.DefaultConfig(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, n := range []int64{0, 1, 3, 4, 49, 50} {
		e := g.Event(n)
		at := e.Time().Format("15:04:05.000")
		switch e.Kind() {
		case nexmark.KindPerson:
			fmt.Println(n, at, "person", e.Person.ID, e.Person.Name, e.Person.State)
		case nexmark.KindAuction:
			fmt.Println(n, at, "auction", e.Auction.ID, "by", e.Auction.Seller, "in category", e.Auction.Category)
		case nexmark.KindBid:
			fmt.Println(n, at, "bid on", e.Bid.Auction, "by", e.Bid.Bidder, "of", e.Bid.Price)
		}
	}
	// Output:
	// 0 00:00:00.000 person 1000 Peter Jones WY
	// 1 00:00:00.000 auction 1000 by 1000 in category 13
	// 3 00:00:00.000 auction 1002 by 1000 in category 10
	// 4 00:00:00.000 bid on 1000 by 1001 of 32530001
	// 49 00:00:00.004 bid on 1000 by 1001 of 545
	// 50 00:00:00.005 person 1001 Sarah Smith ID
}
