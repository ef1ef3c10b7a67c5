package nexmark_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/examples/nexmark"
)

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// TestEncodeDecode: each kind of event goes through its Kafka record and
// back, keyed by its id (a bid by its auction), with its time as the
// record's timestamp.
func TestEncodeDecode(t *testing.T) {
	evs := generate(t, testConfig(), 5)
	for i, wantKey := range []string{"1000", "1000", "1001", "1002", "1000"} {
		e := evs[i]
		r, err := nexmark.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		if string(r.Key) != wantKey || !r.Timestamp.Equal(e.Time()) {
			t.Errorf("event %d (%v): key %s at %v, want %s at %v", i, e.Kind(), r.Key, r.Timestamp, wantKey, e.Time())
		}
		var head struct{ Type string }
		if err := json.Unmarshal(r.Value, &head); err != nil || head.Type != e.Kind().String() {
			t.Errorf("event %d: value %s has type %q, want %q", i, r.Value, head.Type, e.Kind())
		}
		got, err := nexmark.Decode(r)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Errorf("event %d: decoded\n%+v\nwant\n%+v", i, got, e)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	for name, r := range map[string]*kgo.Record{
		"not json":      {Key: []byte("1"), Value: []byte(`{`)},
		"no event":      {Key: []byte("0"), Value: []byte(`{"type":"bid"}`)},
		"wrong type":    {Key: []byte("7"), Value: []byte(`{"type":"person","bid":{"auction":7}}`)},
		"two events":    {Key: []byte("7"), Value: []byte(`{"type":"bid","bid":{"auction":7},"person":{"id":7}}`)},
		"key not id":    {Key: []byte("8"), Value: []byte(`{"type":"bid","bid":{"auction":7}}`)},
		"key of bidder": {Key: []byte("9"), Value: []byte(`{"type":"bid","bid":{"auction":7,"bidder":9}}`)},
	} {
		if e, err := nexmark.Decode(r); err == nil {
			t.Errorf("%s: Decode(%s) = %+v, want an error", name, r.Value, e)
		}
	}
	if _, err := nexmark.Encode(nexmark.Event{}); err == nil {
		t.Error("Encode of an empty event: no error")
	}
}

// TestEncodeResults: each query's records are keyed as documented.
func TestEncodeResults(t *testing.T) {
	check := func(what string, r *kgo.Record, err error, key, field string) {
		t.Helper()
		if err != nil || string(r.Key) != key || !strings.Contains(string(r.Value), field) {
			t.Errorf("%s: key %s, value %s, %v; want key %s and %s", what, r.Key, r.Value, err, key, field)
		}
	}
	r, err := nexmark.EncodeBid(nexmark.Bid{Auction: 1007, Bidder: 3, Price: 5})
	check("bid", r, err, "1007", `"price":5`)
	r, err = nexmark.EncodeQ2(nexmark.Q2Out{Auction: 1107, Price: 9})
	check("q2", r, err, "1107", `"price":9`)
	r, err = nexmark.EncodeQ3(nexmark.Q3Out{Name: "Ann", State: "OR", Auction: 1010})
	check("q3", r, err, "1010", `"state":"OR"`)
	r, err = nexmark.EncodeQ5(nexmark.Q5Out{Auction: 1100, Num: 40})
	check("q5", r, err, "1100", `"num":40`)
	r, err = nexmark.EncodeQ7(nexmark.Q7Out{Auction: 1200, Price: 99})
	check("q7", r, err, "1200", `"price":99`)
	r, err = nexmark.EncodeQ8(nexmark.Q8Out{ID: 1005, Name: "Bo"})
	check("q8", r, err, "1005", `"name":"Bo"`)
}
