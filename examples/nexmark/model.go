package nexmark

import (
	"strconv"
	"time"
)

// Person is a new user of the auction site.
type Person struct {
	ID           int64     `json:"id"`
	Name         string    `json:"name"`
	EmailAddress string    `json:"emailAddress"`
	CreditCard   string    `json:"creditCard"`
	City         string    `json:"city"`
	State        string    `json:"state"`
	DateTime     time.Time `json:"dateTime"`
	// Extra pads the record to the configured average size.
	Extra string `json:"extra"`
}

// Auction is an item put up for sale by a person (Seller).
type Auction struct {
	ID          int64     `json:"id"`
	ItemName    string    `json:"itemName"`
	Description string    `json:"description"`
	InitialBid  int64     `json:"initialBid"`
	Reserve     int64     `json:"reserve"`
	DateTime    time.Time `json:"dateTime"`
	Expires     time.Time `json:"expires"`
	Seller      int64     `json:"seller"`
	Category    int64     `json:"category"`
	Extra       string    `json:"extra"`
}

// Bid is a person's (Bidder) bid on an auction, in cents.
type Bid struct {
	Auction  int64     `json:"auction"`
	Bidder   int64     `json:"bidder"`
	Price    int64     `json:"price"`
	Channel  string    `json:"channel"`
	URL      string    `json:"url"`
	DateTime time.Time `json:"dateTime"`
	Extra    string    `json:"extra"`
}

// Event is one record of the Nexmark stream: exactly one of Person,
// Auction and Bid is set.
type Event struct {
	Person  *Person
	Auction *Auction
	Bid     *Bid
}

// Kind says which of an event's fields is set.
type Kind int

const (
	KindPerson Kind = iota + 1
	KindAuction
	KindBid
)

func (k Kind) String() string {
	switch k {
	case KindPerson:
		return "person"
	case KindAuction:
		return "auction"
	case KindBid:
		return "bid"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Kind is the kind of the one field set, 0 if none or several are.
func (e Event) Kind() Kind {
	switch {
	case e.Person != nil && e.Auction == nil && e.Bid == nil:
		return KindPerson
	case e.Auction != nil && e.Person == nil && e.Bid == nil:
		return KindAuction
	case e.Bid != nil && e.Person == nil && e.Auction == nil:
		return KindBid
	}
	return 0
}

// Time is the event's time (its DateTime).
func (e Event) Time() time.Time {
	switch e.Kind() {
	case KindPerson:
		return e.Person.DateTime
	case KindAuction:
		return e.Auction.DateTime
	case KindBid:
		return e.Bid.DateTime
	}
	return time.Time{}
}

// Key is the id an event's Kafka record is keyed by: a person's id, an
// auction's id, a bid's auction. Bids are then in the partition of their
// auction, which q5 relies on; persons and auctions each in that of their
// own id, so joins on the seller repartition the auctions.
func (e Event) Key() int64 {
	switch e.Kind() {
	case KindPerson:
		return e.Person.ID
	case KindAuction:
		return e.Auction.ID
	case KindBid:
		return e.Bid.Auction
	}
	return 0
}
