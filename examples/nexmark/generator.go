package nexmark

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Generator makes the Nexmark event stream as Beam's Nexmark (Generator,
// GeneratorConfig, PersonGenerator, AuctionGenerator, BidGenerator) and
// Flink's port of it make it: event n is a function of n alone, drawn from
// a java.util.Random seeded with n, so any task can make any slice of the
// stream and every run makes the same one. Persons and auctions are Beam's
// to the byte, and so are bids but for the fields Flink added (channel and
// url, drawn before the padding, which is then Flink's): TestGeneratorIsBeams
// checks it against Beam 2.60.0's generator.
//
// Simplified against Flink's: bid channels and URLs are deterministic (Flink
// draws its URLs from an unseeded Random); one generator at a constant
// rate, events in order (no out-of-order groups or delayed events),
// numbered from 0 as Beam's are.
type Generator struct {
	c       Config
	baseMs  int64
	delayUs int64 // event time between two events, µs
}

// NewGenerator validates c and returns its generator.
func NewGenerator(c Config) (*Generator, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	// RateUnit.rateToPeriodUs: whole microseconds, rounded.
	rate := int64(c.EventsPerSecond)
	return &Generator{c: c, baseMs: c.BaseTime.UnixMilli(), delayUs: (1e6 + rate/2) / rate}, nil
}

// Config is the generator's configuration.
func (g *Generator) Config() Config { return g.c }

// timestamp is event n's time in Unix ms
// (GeneratorConfig.timestampAndInterEventDelayUsForEvent).
func (g *Generator) timestamp(n int64) int64 { return g.baseMs + n*g.delayUs/1000 }

// Time is event n's time.
func (g *Generator) Time(n int64) time.Time { return time.UnixMilli(g.timestamp(n)).UTC() }

// Event makes event n (n >= 0).
func (g *Generator) Event(n int64) Event {
	ts := g.timestamp(n)
	r := newJavaRandom(n)
	switch rem := n % totalProportion; {
	case rem < PersonProportion:
		return Event{Person: g.person(n, &r, ts)}
	case rem < PersonProportion+AuctionProportion:
		return Event{Auction: g.auction(n, &r, ts)}
	default:
		return Event{Bid: g.bid(n, &r, ts)}
	}
}

var (
	usStates   = strings.Split("AZ,CA,ID,OR,WA,WY", ",")
	usCities   = strings.Split("Phoenix,Los Angeles,San Francisco,Boise,Portland,Bend,Redmond,Seattle,Kent,Cheyenne", ",")
	firstNames = strings.Split("Peter,Paul,Luke,John,Saul,Vicky,Kate,Julie,Sarah,Deiter,Walter", ",")
	lastNames  = strings.Split("Shultz,Abrams,Spencer,White,Bartels,Walton,Smith,Jones,Noris", ",")
)

// person is PersonGenerator.nextPerson.
func (g *Generator) person(id int64, r *javaRandom, ts int64) *Person {
	p := &Person{ID: lastBase0PersonID(id) + FirstPersonID}
	p.Name = firstNames[r.intn(int32(len(firstNames)))] + " " + lastNames[r.intn(int32(len(lastNames)))]
	p.EmailAddress = nextString(r, 7, ' ') + "@" + nextString(r, 5, ' ') + ".com"
	var card strings.Builder
	for i := range 4 {
		if i > 0 {
			card.WriteByte(' ')
		}
		fmt.Fprintf(&card, "%04d", r.intn(10000))
	}
	p.CreditCard = card.String()
	p.City = usCities[r.intn(int32(len(usCities)))]
	p.State = usStates[r.intn(int32(len(usStates)))]
	p.DateTime = time.UnixMilli(ts).UTC()
	size := 8 + len(p.Name) + len(p.EmailAddress) + len(p.CreditCard) + len(p.City) + len(p.State)
	p.Extra = nextExtra(r, size, g.c.AvgPersonByteSize)
	return p
}

// nextBase0PersonID draws a person among the active ones, or up to
// personIDLead ahead of the last one created.
func (g *Generator) nextBase0PersonID(id int64, r *javaRandom) int64 {
	people := lastBase0PersonID(id) + 1
	active := min(people, int64(g.c.NumActivePeople))
	return people - active + r.longn(active+personIDLead)
}

// nextBase0AuctionID draws an auction among those likely still in flight,
// or up to auctionIDLead ahead of the last one created.
func (g *Generator) nextBase0AuctionID(id int64, r *javaRandom) int64 {
	last := lastBase0AuctionID(id)
	first := max(last-int64(g.c.NumInFlightAuctions), 0)
	return first + r.longn(last-first+1+auctionIDLead)
}

// auction is AuctionGenerator.nextAuction.
func (g *Generator) auction(id int64, r *javaRandom, ts int64) *Auction {
	a := &Auction{ID: lastBase0AuctionID(id) + FirstAuctionID}
	if r.intn(int32(g.c.HotSellersRatio)) > 0 {
		a.Seller = lastBase0PersonID(id) / hotSellerBatch * hotSellerBatch
	} else {
		a.Seller = g.nextBase0PersonID(id, r)
	}
	a.Seller += FirstPersonID
	a.Category = FirstCategoryID + int64(r.intn(NumCategories))
	a.InitialBid = nextPrice(r)
	a.DateTime = time.UnixMilli(ts).UTC()
	a.Expires = time.UnixMilli(ts + g.auctionLength(id, r, ts)).UTC()
	a.ItemName = nextString(r, 20, ' ')
	a.Description = nextString(r, 100, ' ')
	a.Reserve = a.InitialBid + nextPrice(r)
	size := 8 + len(a.ItemName) + len(a.Description) + 8 + 8 + 8 + 8 + 8
	a.Extra = nextExtra(r, size, g.c.AvgAuctionByteSize)
	return a
}

// auctionLength draws how long auction event n runs, in ms: on average
// until numInFlightAuctions more auctions have been created.
func (g *Generator) auctionLength(n int64, r *javaRandom, ts int64) int64 {
	eventsForAuctions := int64(g.c.NumInFlightAuctions) * totalProportion / AuctionProportion
	horizon := g.timestamp(n+eventsForAuctions) - ts
	return 1 + r.longn(max(horizon*2, 1))
}

// Bid channels: half of the bids come through one of the hot channels, the
// others through one of channels many.
const (
	hotChannelsRatio = 2
	channels         = 10_000
)

var hotChannels = []string{"Google", "Facebook", "Baidu", "Apple"}

// channelURLs are the hot channels' URLs and those of channel-0 ..
// channel-9999. Flink draws them from an unseeded Random once per run;
// here each is drawn from a Random seeded with its channel, so they are
// the same in every run.
var channelURLs = sync.OnceValues(func() (hot, other []string) {
	for i := range hotChannels {
		r := newJavaRandom(-1 - int64(i))
		hot = append(hot, baseURL(&r))
	}
	other = make([]string, channels)
	for c := range other {
		r := newJavaRandom(int64(c))
		other[c] = baseURL(&r)
		if r.intn(10) > 0 {
			rev := int32(bits.Reverse32(uint32(c)))
			if rev < 0 && rev != math.MinInt32 {
				rev = -rev // Math.abs, which leaves MinInt32 as it is
			}
			other[c] += "&channel_id=" + strconv.Itoa(int(rev))
		}
	}
	return hot, other
})

func baseURL(r *javaRandom) string {
	return "https://www.nexmark.com/" + nextString(r, 5, '_') + "/" + nextString(r, 5, '_') + "/" + nextString(r, 5, '_') + "/item.htm?query=1"
}

// bid is BidGenerator.nextBid.
func (g *Generator) bid(id int64, r *javaRandom, ts int64) *Bid {
	b := &Bid{}
	if r.intn(int32(g.c.HotAuctionRatio)) > 0 {
		b.Auction = lastBase0AuctionID(id) / hotAuctionBatch * hotAuctionBatch
	} else {
		b.Auction = g.nextBase0AuctionID(id, r)
	}
	b.Auction += FirstAuctionID
	if r.intn(int32(g.c.HotBiddersRatio)) > 0 {
		// The second of the batch, so that hot bidders are not hot sellers.
		b.Bidder = lastBase0PersonID(id)/hotBidderBatch*hotBidderBatch + 1
	} else {
		b.Bidder = g.nextBase0PersonID(id, r)
	}
	b.Bidder += FirstPersonID
	b.Price = nextPrice(r)
	hot, other := channelURLs()
	if r.intn(hotChannelsRatio) > 0 {
		i := r.intn(int32(len(hotChannels)))
		b.Channel, b.URL = hotChannels[i], hot[i]
	} else {
		c := r.intn(channels)
		b.Channel, b.URL = "channel-"+strconv.Itoa(int(c)), other[c]
	}
	b.DateTime = time.UnixMilli(ts).UTC()
	b.Extra = nextExtra(r, 8+8+8+8, g.c.AvgBidByteSize)
	return b
}

// nextPrice is PriceGenerator.nextPrice: cents, log-uniform from $1 to $1M.
func nextPrice(r *javaRandom) int64 {
	return int64(math.Round(math.Pow(10, r.float64()*6) * 100))
}

// nextString is StringsGenerator.nextString: 3 to maxLength-1 letters, or
// special one time in 13, trimmed of spaces.
func nextString(r *javaRandom, maxLength int32, special byte) string {
	n := 3 + r.intn(maxLength-3)
	b := make([]byte, 0, n)
	for range n {
		if r.intn(13) == 0 {
			b = append(b, special)
		} else {
			b = append(b, byte('a'+r.intn(26)))
		}
	}
	return strings.Trim(string(b), " ")
}

// nextExactString is StringsGenerator.nextExactString: n characters, six
// from each draw. As in Java, a negative draw gives characters below 'a'
// (from 'H'): still printable ASCII.
func nextExactString(r *javaRandom, n int) string {
	b := make([]byte, n)
	var rnd int32
	left := 0
	for i := range b {
		if left == 0 {
			rnd, left = r.nextInt(), 6
		}
		b[i] = byte('a' + rnd%26)
		rnd /= 26
		left--
	}
	return string(b)
}

// nextExtra is StringsGenerator.nextExtra: padding that brings a record of
// size bytes to avg on average (±20%), nothing if it is there already.
func nextExtra(r *javaRandom, size, avg int) string {
	if size > avg {
		return ""
	}
	avg -= size
	delta := int(math.Round(float64(avg) * 0.2))
	n := avg - delta
	if delta > 0 {
		n += int(r.intn(int32(2 * delta)))
	}
	return nextExactString(r, n)
}
