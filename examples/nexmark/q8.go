package nexmark

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/stream"
)

// Q8Window is q8's tumbling window.
const Q8Window = 10 * time.Second

// Q8Out is a result of q8: a person who joined in the window [Start, End)
// and put up an auction in it too.
type Q8Out struct {
	ID    int64     `json:"id"`
	Name  string    `json:"name"`
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

// EncodeQ8 writes a result of q8, keyed by the person's id.
func EncodeQ8(o Q8Out) (*kgo.Record, error) { return encodeJSON(o.ID, o) }

// q8Person and q8Auction are what q8 keeps of persons and auctions.
type (
	q8Person struct {
		ID   int64
		Name string
	}
	q8Auction struct{ Seller int64 }
)

// Q8 is monitor new users: the persons who put up an auction in the 10 s
// tumbling window in which they joined, by a window join of persons and
// auctions on person id = seller. The join makes a pair per auction; as
// Flink's query (which groups auctions by seller and window first), q8
// writes a person once per window.
//
// Persons are keyed by their ids in the input and stay in their tasks;
// auctions move to the task of their seller (KeyBy).
func Q8(ev stream.Stream[Event]) stream.Stream[Q8Out] {
	persons := stream.FlatMap(ev, "q8-persons", func(e Event, out *stream.Emitter[q8Person]) error {
		if e.Person == nil {
			return nil
		}
		return out.Emit(q8Person{ID: e.Person.ID, Name: e.Person.Name})
	})
	auctions := stream.FlatMap(ev, "q8-auctions", func(e Event, out *stream.Emitter[q8Auction]) error {
		if e.Auction == nil {
			return nil
		}
		return out.Emit(q8Auction{Seller: e.Auction.Seller})
	})
	bySeller := stream.KeyBy(auctions, "q8-by-seller", func(a q8Auction) int64 { return a.Seller }, idCodec{}, q8AuctionCodec{})
	byID := stream.KeyByPartitioned(persons, "q8-person-id", func(p q8Person) int64 { return p.ID }, idCodec{})
	pairs := stream.WindowJoin(byID, bySeller, "q8-join", stream.Tumbling(Q8Window), state.Codec[q8Person](q8PersonCodec{}), state.Codec[q8Auction](q8AuctionCodec{}),
		func(_ int64, w stream.Window, p q8Person, _ q8Auction) (Q8Out, error) {
			return Q8Out{ID: p.ID, Name: p.Name, Start: w.Start.UTC(), End: w.End.UTC()}, nil
		})
	// The join's pairs are in the task of their person (both sides are
	// keyed by the person's id as the input keys persons): the same key,
	// encoded the same way, keeps them there for the worker's check.
	byPerson := stream.KeyByPartitioned(pairs, "q8-pair-person", func(o Q8Out) int64 { return o.ID }, idCodec{})
	return stream.Process(byPerson, "q8-distinct", newQ8Distinct)
}

// newQ8Distinct passes the first of a person's pairs of a window. The join
// emits all of a window's pairs of a person at once, when the watermark
// reaches the window's end, and windows in order: remembering the last
// window written is enough, until that watermark has gone by.
func newQ8Distinct(s *stream.Setup) (stream.Processor[int64, Q8Out, Q8Out], error) {
	type proc = stream.Processor[int64, Q8Out, Q8Out]
	last, err := stream.ValueState(s, "last-window", state.Int64())
	if err != nil {
		return proc{}, err
	}
	return proc{
		Process: func(ctx *stream.Context[int64, Q8Out], o Q8Out) error {
			start := o.Start.UnixMilli()
			seen, ok, err := last.Get()
			if err != nil || ok && seen == start {
				return err
			}
			if err := last.Set(start); err != nil {
				return err
			}
			if err := ctx.RegisterEventTimer(o.End.Add(-time.Millisecond)); err != nil {
				return err
			}
			return ctx.Emit(o)
		},
		OnEventTimer: func(*stream.Context[int64, Q8Out], time.Time) error { return last.Clear() },
	}, nil
}

type q8PersonCodec struct{}

func (q8PersonCodec) Append(b []byte, p q8Person) []byte {
	return appendString(appendInt(b, p.ID), p.Name)
}

func (q8PersonCodec) Decode(b []byte) (q8Person, error) {
	r := reader{b: b}
	p := q8Person{ID: r.int(), Name: r.string()}
	return p, r.end("q8 person")
}

type q8AuctionCodec struct{}

func (q8AuctionCodec) Append(b []byte, a q8Auction) []byte { return appendInt(b, a.Seller) }

func (q8AuctionCodec) Decode(b []byte) (q8Auction, error) {
	r := reader{b: b}
	a := q8Auction{Seller: r.int()}
	return a, r.end("q8 auction")
}
