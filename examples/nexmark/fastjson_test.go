package nexmark

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// slowEvent is what encoding/json makes of an event, by reflection.
func slowEvent(e Event) ([]byte, error) {
	return json.Marshal(wireEvent{Type: e.Kind().String(), Person: e.Person, Auction: e.Auction, Bid: e.Bid})
}

func slowParse(b []byte) (Event, error) { return unmarshalWire(b) }

// TestFastJSONIsEncodingJSON: over a generated stream (whose padding has
// backslashes and whose URLs have ampersands) and hand-made odd values,
// the fast codec writes encoding/json's bytes and reads back the same
// event as encoding/json does.
func TestFastJSONIsEncodingJSON(t *testing.T) {
	g, err := NewGenerator(DefaultConfig(time.UnixMilli(1767225600000)))
	if err != nil {
		t.Fatal(err)
	}
	var evs []Event
	for n := range int64(5000) {
		evs = append(evs, g.Event(n))
	}
	at := time.Date(2026, 3, 4, 5, 6, 7, 890_000_000, time.FixedZone("", 3600))
	evs = append(evs,
		Event{Person: &Person{ID: -1, Name: "Zoë \"Z\" <z>", City: "a\tb\nc\r\x01\x7f", State: "\u2028", DateTime: at, Extra: "\xff bad utf-8"}},
		Event{Auction: &Auction{ID: 1 << 62, ItemName: `\/`, Description: "😀", DateTime: at, Expires: time.Time{}}},
		Event{Bid: &Bid{Auction: -9, URL: "https://x/?a=1&b=2", DateTime: at.UTC()}},
	)
	for i, e := range evs {
		want, err := slowEvent(e)
		if err != nil {
			t.Fatal(err)
		}
		got, err := appendEvent(nil, e)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("event %d: wrote\n%s\nencoding/json writes\n%s", i, got, want)
		}
		fast, err := parseEvent(got)
		if err == errSlow {
			fast, err = slowParse(got) // what Decode does
		}
		slow, slowErr := slowParse(got)
		if err != nil || slowErr != nil || !reflect.DeepEqual(fast, slow) {
			t.Fatalf("event %d: read\n%+v (%v)\nencoding/json reads\n%+v (%v)", i, fast, err, slow, slowErr)
		}
		if i < 5000 {
			if _, err := parseEvent(got); err != nil {
				t.Fatalf("event %d: the fast reader gave up on what it wrote: %s", i, got)
			}
		}
	}
}

// TestFastJSONFallsBack: values of another shape go to encoding/json (the
// fast reader says errSlow), which reads them or says why not.
func TestFastJSONFallsBack(t *testing.T) {
	for _, v := range []string{
		`{"bid":{"auction":7},"type":"bid"}`,
		`{"type":"bid","bid":{"bidder":1,"auction":7,"price":2,"channel":"","url":"","dateTime":"2026-01-01T00:00:00Z","extra":""}}`,
		`{"type":"bid","bid":{"auction":7,"bidder":1,"price":2.5,"channel":"","url":"","dateTime":"2026-01-01T00:00:00Z","extra":""}}`,
		`{"type":"bid","bid":{"auction":7,"bidder":1,"price":2,"channel":"\ud83d","url":"","dateTime":"2026-01-01T00:00:00Z","extra":""}}`,
		`{"type":"bid","bid":{"auction":7,"bidder":1,"price":2,"channel":"é","url":"","dateTime":"2026-01-01T00:00:00Z","extra":""}}`,
		`{"type":"bid","bid":{"auction":7,"bidder":1,"price":2,"channel":"","url":"","dateTime":"2026-01-01T00:00:00Z","extra":"","more":1}}`,
		`{"type":"bid","bid":{"auction":7,"bidder":1,"price":2,"channel":"","url":"","dateTime":"2026-01-01T00:00:00Z","extra":""}} x`,
		`{"type":"person","bid":{"auction":7}}`,
		`{"type":"bid","bid":null}`,
	} {
		if _, err := parseEvent([]byte(v)); err != errSlow {
			t.Errorf("fast reader on %s: %v, want errSlow", v, err)
		}
	}
	// Whitespace and escapes of the same shape stay on the fast path.
	v := "{ \"type\" : \"bid\" ,\n\"bid\":{\"auction\":7,\"bidder\":-1,\"price\":2,\"channel\":\"\\u0041\\ud83d\\ude00\",\"url\":\"a\\/b\",\"dateTime\":\"2026-01-01T00:00:00.5Z\",\"extra\":\"\\\\\"} }"
	fast, err := parseEvent([]byte(v))
	slow, slowErr := slowParse([]byte(v))
	if err != nil || slowErr != nil || !reflect.DeepEqual(fast, slow) || fast.Bid.Channel != "A😀" {
		t.Errorf("read %+v (%v), encoding/json %+v (%v)", fast.Bid, err, slow.Bid, slowErr)
	}
}
