package nexmark

import (
	"errors"
	"fmt"
	"time"
)

// The specification's fixed parameters.
const (
	// Of every 50 events, 1 is a person, 3 are auctions and 46 are bids, in
	// that order: event n is a person if n%50 == 0, an auction if n%50 is
	// 1..3, else a bid.
	PersonProportion  = 1
	AuctionProportion = 3
	BidProportion     = 46
	totalProportion   = PersonProportion + AuctionProportion + BidProportion

	// Ids of persons and of auctions start here; categories are
	// FirstCategoryID .. FirstCategoryID+NumCategories-1.
	FirstPersonID   = 1000
	FirstAuctionID  = 1000
	FirstCategoryID = 10
	NumCategories   = 5

	// Ids drawn at random may be this far ahead of the last one created
	// (an auction or bid may name a person or auction yet to come).
	personIDLead  = 10
	auctionIDLead = 10
	// A hot seller, bidder or auction is the first (for bidders, the
	// second) of the last batch of this many persons or auctions.
	hotSellerBatch  = 100
	hotBidderBatch  = 100
	hotAuctionBatch = 100
)

// Config is the generator's configuration: the parameters of Nexmark's
// NexmarkConfiguration that the generator reads, with their defaults, for
// one generator (numEventGenerators 1) at a constant rate, events in order
// (outOfOrderGroupSize 1), numbered from 0 (firstEventId and
// firstEventNumber 0).
type Config struct {
	// BaseTime is event 0's time; event n's is BaseTime + n times the
	// period between events (1/EventsPerSecond in whole microseconds),
	// truncated to the millisecond. Required: a fixed time makes a
	// reproducible stream, the start time a live one.
	BaseTime time.Time
	// EventsPerSecond is the rate event time follows (firstEventRate),
	// at most 1,000,000. Default 10,000.
	EventsPerSecond int
	// NumActivePeople bounds the persons a random seller or bidder is
	// drawn from: the last ones created. Default 1000.
	NumActivePeople int
	// NumInFlightAuctions bounds the auctions a random bid is for: the
	// last ones created. Default 100.
	NumInFlightAuctions int
	// A bid is for the hot auction with probability 1-1/HotAuctionRatio,
	// an auction's seller the hot seller with 1-1/HotSellersRatio, a
	// bidder the hot bidder with 1-1/HotBiddersRatio. Defaults 2, 4, 4.
	HotAuctionRatio, HotSellersRatio, HotBiddersRatio int
	// Average sizes in bytes that each kind's Extra pads to. Defaults 200,
	// 500, 100.
	AvgPersonByteSize, AvgAuctionByteSize, AvgBidByteSize int
}

// DefaultConfig is Nexmark's default configuration with event 0 at base.
func DefaultConfig(base time.Time) Config {
	return Config{
		BaseTime:            base,
		EventsPerSecond:     10_000,
		NumActivePeople:     1000,
		NumInFlightAuctions: 100,
		HotAuctionRatio:     2,
		HotSellersRatio:     4,
		HotBiddersRatio:     4,
		AvgPersonByteSize:   200,
		AvgAuctionByteSize:  500,
		AvgBidByteSize:      100,
	}
}

// Validate returns every problem of c, joined.
func (c Config) Validate() error {
	var errs []error
	if c.BaseTime.IsZero() {
		errs = append(errs, errors.New("nexmark: base time is required"))
	}
	positive := func(name string, v int) {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("nexmark: %s must be > 0, got %d", name, v))
		}
	}
	positive("events per second", c.EventsPerSecond)
	if c.EventsPerSecond > 1_000_000 {
		errs = append(errs, fmt.Errorf("nexmark: events per second must be at most 1,000,000 (a period of 1µs), got %d", c.EventsPerSecond))
	}
	positive("active people", c.NumActivePeople)
	positive("in-flight auctions", c.NumInFlightAuctions)
	positive("hot auction ratio", c.HotAuctionRatio)
	positive("hot sellers ratio", c.HotSellersRatio)
	positive("hot bidders ratio", c.HotBiddersRatio)
	positive("average person size", c.AvgPersonByteSize)
	positive("average auction size", c.AvgAuctionByteSize)
	positive("average bid size", c.AvgBidByteSize)
	return errors.Join(errs...)
}

// lastBase0PersonID is the 0-based id of the last person created at or
// before event id.
func lastBase0PersonID(id int64) int64 {
	epoch, offset := id/totalProportion, id%totalProportion
	if offset >= PersonProportion {
		offset = PersonProportion - 1 // an auction or bid: the epoch's last person
	}
	return epoch*PersonProportion + offset
}

// lastBase0AuctionID is the 0-based id of the last auction created at or
// before event id (-1 before the first).
func lastBase0AuctionID(id int64) int64 {
	epoch, offset := id/totalProportion, id%totalProportion
	switch {
	case offset < PersonProportion:
		epoch-- // a person: the previous epoch's last auction
		offset = AuctionProportion - 1
	case offset >= PersonProportion+AuctionProportion:
		offset = AuctionProportion - 1 // a bid: the epoch's last auction
	default:
		offset -= PersonProportion
	}
	return epoch*AuctionProportion + offset
}
