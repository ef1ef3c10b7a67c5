package nexmark

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/internal/fuzzseed"
	"github.com/weirstream/weir/state"
)

// Fuzz targets for the codecs of the Nexmark events (JSON, by hand and by
// encoding/json) and of what the queries keep in state and send through
// repartition topics (binary). Their seeds run with plain go test; to
// search, run one target at a time:
//
//	go test -run '^$' -fuzz '^FuzzDecodeEvent$' -fuzztime 5m -parallel 1 ./examples/nexmark

// fuzzSeed is one seed of a fuzz target (internal/fuzzseed).
type fuzzSeed = fuzzseed.Seed

// eventSeeds are the records of a few generated events of each kind.
func eventSeeds(tb testing.TB) []fuzzSeed {
	tb.Helper()
	g, err := NewGenerator(DefaultConfig(time.UnixMilli(1767225600000)))
	if err != nil {
		tb.Fatal(err)
	}
	var seeds []fuzzSeed
	have := map[Kind]int{}
	for n := int64(0); len(seeds) < 6; n++ {
		e := g.Event(n)
		if have[e.Kind()] == 2 {
			continue
		}
		have[e.Kind()]++
		r, err := Encode(e)
		if err != nil {
			tb.Fatal(err)
		}
		seeds = append(seeds, fuzzSeed{Name: fmt.Sprintf("generated-%s-%d", e.Kind(), n), Args: []any{r.Key, r.Value}})
	}
	return seeds
}

// FuzzDecodeEvent: no record makes Decode panic. Where the fast reader
// and encoding/json both read a value they read the same event; where
// only the fast one does (it is no validator: leading zeros, say), the
// event it read is one encoding/json reads back from its encoding. An
// event Decode returns encodes, byte for byte as encoding/json would, to
// a record that decodes to it again.
func FuzzDecodeEvent(f *testing.F) {
	bid := `{"type":"bid","bid":{"auction":7,"bidder":1,"price":2,"channel":"c","url":"u","dateTime":"2026-01-01T00:00:00Z","extra":""}}`
	fuzzseed.Add(f, append(eventSeeds(f), []fuzzSeed{
		{Name: "other-field-order", Args: []any{[]byte("7"), []byte(`{"bid":{"price":2,"auction":7},"type":"bid"}`)}},
		{Name: "escapes", Args: []any{[]byte("7"), []byte("{ \"type\" : \"bid\" ,\n\"bid\":{\"auction\":7,\"bidder\":-1,\"price\":2,\"channel\":\"\\u0041\\ud83d\\ude00\",\"url\":\"a\\/b\",\"dateTime\":\"2026-01-01T00:00:00.5+01:00\",\"extra\":\"\\\\\"} }")}},
		{Name: "lone-surrogate", Args: []any{[]byte("7"), []byte(`{"type":"bid","bid":{"auction":7,"bidder":1,"price":2,"channel":"\ud83d","url":"","dateTime":"2026-01-01T00:00:00Z","extra":""}}`)}},
		{Name: "leading-zero", Args: []any{[]byte("7"), []byte(`{"type":"bid","bid":{"auction":07,"bidder":1,"price":2,"channel":"","url":"","dateTime":"2026-01-01T00:00:00Z","extra":""}}`)}},
		{Name: "float", Args: []any{[]byte("7"), []byte(`{"type":"bid","bid":{"auction":7,"bidder":1,"price":2.5,"channel":"","url":"","dateTime":"2026-01-01T00:00:00Z","extra":""}}`)}},
		{Name: "wrong-key", Args: []any{[]byte("8"), []byte(bid)}},
		{Name: "two-events", Args: []any{[]byte("7"), []byte(`{"type":"bid","bid":{"auction":7},"person":{"id":7}}`)}},
		{Name: "null-event", Args: []any{[]byte("7"), []byte(`{"type":"bid","bid":null}`)}},
		{Name: "trailing", Args: []any{[]byte("7"), []byte(bid + " x")}},
		{Name: "bad-time", Args: []any{[]byte("7"), []byte(`{"type":"bid","bid":{"auction":7,"bidder":1,"price":2,"channel":"","url":"","dateTime":"2026-01-01T24:00:00Z","extra":""}}`)}},
	}...))
	f.Fuzz(func(t *testing.T, key, value []byte) {
		e, err := Decode(&kgo.Record{Key: key, Value: value})

		fast, fastErr := parseEvent(value)
		slow, slowErr := slowParse(value)
		switch {
		case fastErr != nil && fastErr != errSlow:
			t.Fatalf("the fast reader failed with %v, not errSlow", fastErr)
		case fastErr == nil && slowErr == nil && !reflect.DeepEqual(fast, slow):
			t.Fatalf("%s: the fast reader reads\n%+v\nencoding/json\n%+v", value, fast, slow)
		case fastErr == nil && slowErr != nil:
			enc, err := appendEvent(nil, fast)
			if err != nil {
				t.Fatalf("the fast reader read %+v from %s, which does not encode: %v", fast, value, err)
			}
			if back, err := slowParse(enc); err != nil || !sameEvent(back, fast) {
				t.Fatalf("the fast reader read %+v from %s (encoding/json: %v); encoding/json reads it back as %+v, %v", fast, value, slowErr, back, err)
			}
		}
		if err != nil {
			return
		}
		if want := strconv.FormatInt(e.Key(), 10); string(key) != want {
			t.Fatalf("Decode took key %q for an event keyed %s", key, want)
		}
		r, err := Encode(e)
		if err != nil {
			t.Fatalf("a decoded event does not encode: %v\n%+v", err, e)
		}
		if want, err := slowEvent(e); err == nil && !bytes.Equal(r.Value, want) {
			t.Fatalf("wrote\n%s\nencoding/json writes\n%s", r.Value, want)
		}
		back, err := Decode(r)
		if err != nil || !sameEvent(back, e) {
			t.Fatalf("%+v encodes to %s, which decodes to %+v, %v", e, r.Value, back, err)
		}
	})
}

// sameEvent compares events as their JSON keeps them: times as instants
// with their offset, whatever *time.Location stands for it, and text as
// the characters it decodes to (encoding/json writes an invalid byte as
// \ufffd, the character U+FFFD as itself).
func sameEvent(a, b Event) bool {
	ja, erra := slowEvent(a)
	jb, errb := slowEvent(b)
	if erra != nil || errb != nil {
		return false
	}
	var va, vb any
	return json.Unmarshal(ja, &va) == nil && json.Unmarshal(jb, &vb) == nil && reflect.DeepEqual(va, vb)
}

// FuzzEventRoundTrip: an event of any field values encodes byte for byte
// as encoding/json would, and decodes to itself when its strings are
// UTF-8 (both writers replace invalid bytes).
func FuzzEventRoundTrip(f *testing.F) {
	fuzzseed.Add(f, []fuzzSeed{
		{Name: "bid", Args: []any{uint8(KindBid), int64(1000), int64(1001), int64(32530001), "Google", "https://x/?a=1&b=2", "", int64(1767225600123)}},
		{Name: "person-odd", Args: []any{uint8(KindPerson), int64(-1), int64(0), int64(0), "Zoë \"Z\" <z>", "a\tb\nc\r\x01\x7f", "\u2028\xff", int64(-62135596800000)}},
		{Name: "auction-max", Args: []any{uint8(KindAuction), int64(1 << 62), int64(-1 << 63), int64(1<<63 - 1), `\/`, "😀", "&amp;", int64(253402300799999)}},
	})
	f.Fuzz(func(t *testing.T, kind uint8, id, a, b int64, s1, s2, s3 string, ms int64) {
		at := time.UnixMilli(ms).UTC()
		if y := at.Year(); y < 0 || y > 9999 {
			return // encoding/json writes no such time, nor does appendEvent promise to
		}
		var e Event
		switch Kind(kind%3 + 1) {
		case KindPerson:
			e.Person = &Person{ID: id, Name: s1, EmailAddress: s2, CreditCard: s3, City: s1 + s2, State: s3, DateTime: at, Extra: s2}
		case KindAuction:
			e.Auction = &Auction{ID: id, ItemName: s1, Description: s2, InitialBid: a, Reserve: b, DateTime: at, Expires: at.Add(time.Duration(b % int64(time.Hour))), Seller: a, Category: b, Extra: s3}
		default:
			e.Bid = &Bid{Auction: id, Bidder: a, Price: b, Channel: s1, URL: s2, DateTime: at, Extra: s3}
		}
		r, err := Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		want, err := slowEvent(e)
		if err != nil {
			return // a time encoding/json refuses: Expires moved out of the years it takes
		}
		if !bytes.Equal(r.Value, want) {
			t.Fatalf("wrote\n%s\nencoding/json writes\n%s", r.Value, want)
		}
		back, err := Decode(r)
		if err != nil {
			t.Fatalf("decode %s: %v", r.Value, err)
		}
		if utf8.ValidString(s1) && utf8.ValidString(s2) && utf8.ValidString(s3) { // not joined: halves of a character may meet
			if !reflect.DeepEqual(back, e) {
				t.Fatalf("%+v decodes as %+v", e, back)
			}
		} else if !sameEvent(back, e) {
			t.Fatalf("%+v decodes as %+v", e, back)
		}
	})
}

// FuzzBinaryCodecs: no bytes make a query's state or repartition codec
// panic; what one decodes encodes to bytes that decode to the same value
// and encode the same again.
func FuzzBinaryCodecs(f *testing.F) {
	at := time.UnixMilli(1767225600123).UTC()
	bid := Bid{Auction: 1000, Bidder: -1, Price: 1 << 40, Channel: "Google", URL: "https://x/", DateTime: at, Extra: "é"}
	fuzzseed.Add(f, []fuzzSeed{
		{Name: "q3-person", Args: []any{q3PersonCodec{}.Append(nil, q3Person{ID: 1001, Name: "Kate Smith", City: "Bend", State: "OR"})}},
		{Name: "q3-auction", Args: []any{q3AuctionCodec{}.Append(nil, q3Auction{ID: 1200, Seller: 1001})}},
		{Name: "q5-count", Args: []any{bidCountCodec{}.Append(nil, bidCount{Auction: 1100, Count: 300, End: at.UnixMilli()})}},
		{Name: "q7-highest", Args: []any{topBidsCodec{}.Append(nil, topBids{End: 10_000, Price: bid.Price, Bids: []Bid{bid, bid}})}},
		{Name: "q8-person", Args: []any{q8PersonCodec{}.Append(nil, q8Person{ID: 1, Name: ""})}},
		{Name: "q8-auction", Args: []any{q8AuctionCodec{}.Append(nil, q8Auction{Seller: 1099})}},
		{Name: "id", Args: []any{idCodec{}.Append(nil, -1<<63)}},
		{Name: "q7-too-many-bids", Args: []any{[]byte{0, 0, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}}},
		{Name: "q7-negative-bids", Args: []any{[]byte{0, 0, 1}}},
		{Name: "string-past-end", Args: []any{[]byte{2, 0x7f, 'a'}}},
		{Name: "long-varint", Args: []any{[]byte{0x80, 0x80, 0x00, 0x02}}},
	})
	f.Fuzz(func(t *testing.T, b []byte) {
		binaryRoundTrip(t, "q3 person", q3PersonCodec{}, b)
		binaryRoundTrip(t, "q3 auction", q3AuctionCodec{}, b)
		binaryRoundTrip(t, "q5 count", bidCountCodec{}, b)
		binaryRoundTrip(t, "q7 highest", topBidsCodec{}, b)
		binaryRoundTrip(t, "q8 person", q8PersonCodec{}, b)
		binaryRoundTrip(t, "q8 auction", q8AuctionCodec{}, b)
		binaryRoundTrip(t, "id", idCodec{}, b)
	})
}

func binaryRoundTrip[T any](t *testing.T, what string, c state.Codec[T], b []byte) {
	t.Helper()
	v, err := c.Decode(b)
	if err != nil {
		return
	}
	enc := c.Append(nil, v)
	v2, err := c.Decode(enc)
	if err != nil || !reflect.DeepEqual(v2, v) {
		t.Fatalf("%s: %x decodes to %+v, which encodes to %x, which decodes to %+v, %v", what, b, v, enc, v2, err)
	}
	if enc2 := c.Append(nil, v2); !bytes.Equal(enc2, enc) {
		t.Fatalf("%s: encoding is not stable: %x then %x", what, enc, enc2)
	}
}
