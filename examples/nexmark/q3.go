package nexmark

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/stream"
)

// Q3Out is a result of q3: a seller in Oregon, Idaho or California and one
// of their auctions in category 10.
type Q3Out struct {
	Name    string `json:"name"`
	City    string `json:"city"`
	State   string `json:"state"`
	Auction int64  `json:"auction"`
}

// EncodeQ3 writes a result of q3, keyed by its auction.
func EncodeQ3(o Q3Out) (*kgo.Record, error) { return encodeJSON(o.Auction, o) }

// Q3Category is the category of q3's auctions.
const Q3Category = 10

// Q3State says whether a person's state is one of q3's.
func Q3State(s string) bool { return s == "OR" || s == "ID" || s == "CA" }

// Q3 is the local item suggestion: an incremental join of the persons in
// OR, ID or CA with their auctions of category 10, on seller = person id.
// Each pair is written once, when the later of the two comes; the order in
// which they come does not matter (an auction may come before its seller:
// the generator draws sellers up to 10 persons ahead).
//
// Persons are keyed by their ids in the input and stay in their tasks;
// auctions are keyed by their own ids, and move to the task of their
// seller (KeyBy).
func Q3(ev stream.Stream[Event]) stream.Stream[Q3Out] {
	// Every person, not only q3's: knowing a seller is not in OR, ID or
	// CA lets the join drop their auctions instead of keeping them.
	persons := stream.FlatMap(ev, "q3-persons", func(e Event, out *stream.Emitter[q3Person]) error {
		if e.Person == nil {
			return nil
		}
		return out.Emit(q3Person{ID: e.Person.ID, Name: e.Person.Name, City: e.Person.City, State: e.Person.State})
	})
	auctions := stream.FlatMap(ev, "q3-auctions", func(e Event, out *stream.Emitter[q3Auction]) error {
		if e.Auction == nil || e.Auction.Category != Q3Category {
			return nil
		}
		return out.Emit(q3Auction{ID: e.Auction.ID, Seller: e.Auction.Seller})
	})
	bySeller := stream.KeyBy(auctions, "q3-by-seller", func(a q3Auction) int64 { return a.Seller }, idCodec{}, q3AuctionCodec{})
	byID := stream.KeyByPartitioned(persons, "q3-person-id", func(p q3Person) int64 { return p.ID }, idCodec{})
	return stream.CoProcess(byID, bySeller, "q3-join", newQ3Join)
}

// q3Person is what q3 keeps of a person.
type q3Person struct {
	ID                int64
	Name, City, State string
}

// q3Auction is what q3 keeps of an auction.
type q3Auction struct{ ID, Seller int64 }

// newQ3Join keeps, per person id, the person once seen, and until then the
// ids of the auctions waiting for them. A person comes once: after that an
// auction is joined (or dropped) at once and not kept.
func newQ3Join(s *stream.Setup) (stream.CoProcessor[int64, q3Person, q3Auction, Q3Out], error) {
	type proc = stream.CoProcessor[int64, q3Person, q3Auction, Q3Out]
	person, err := stream.ValueState(s, "person", state.Codec[q3Person](q3PersonCodec{}))
	if err != nil {
		return proc{}, err
	}
	waiting, err := stream.ListState(s, "waiting-auctions", state.Int64())
	if err != nil {
		return proc{}, err
	}
	return proc{
		Process1: func(ctx *stream.Context[int64, Q3Out], p q3Person) error {
			if err := person.Set(p); err != nil {
				return err
			}
			if Q3State(p.State) {
				err := waiting.Range(func(id int64) error {
					return ctx.Emit(Q3Out{Name: p.Name, City: p.City, State: p.State, Auction: id})
				})
				if err != nil {
					return err
				}
			}
			return waiting.Clear()
		},
		Process2: func(ctx *stream.Context[int64, Q3Out], a q3Auction) error {
			p, ok, err := person.Get()
			switch {
			case err != nil:
				return err
			case !ok:
				return waiting.Add(a.ID)
			case Q3State(p.State):
				return ctx.Emit(Q3Out{Name: p.Name, City: p.City, State: p.State, Auction: a.ID})
			}
			return nil
		},
	}, nil
}

type q3PersonCodec struct{}

func (q3PersonCodec) Append(b []byte, p q3Person) []byte {
	b = appendInt(b, p.ID)
	b = appendString(b, p.Name)
	b = appendString(b, p.City)
	return appendString(b, p.State)
}

func (q3PersonCodec) Decode(b []byte) (q3Person, error) {
	r := reader{b: b}
	p := q3Person{ID: r.int(), Name: r.string(), City: r.string(), State: r.string()}
	return p, r.end("q3 person")
}

type q3AuctionCodec struct{}

func (q3AuctionCodec) Append(b []byte, a q3Auction) []byte {
	return appendInt(appendInt(b, a.ID), a.Seller)
}

func (q3AuctionCodec) Decode(b []byte) (q3Auction, error) {
	r := reader{b: b}
	a := q3Auction{ID: r.int(), Seller: r.int()}
	return a, r.end("q3 auction")
}
