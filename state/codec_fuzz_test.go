package state

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/weirstream/weir/internal/fuzzseed"
)

// fuzzRecord is a structured value for the JSON codec: nested, with the
// kinds encoding/json treats apart (pointers, maps, slices, raw bytes).
// No omitempty: it writes an empty list as nothing, which decodes as nil,
// and the round trip would differ by design.
type fuzzRecord struct {
	Name  string            `json:"name"`
	N     int64             `json:"n"`
	F     float64           `json:"f"`
	Ok    bool              `json:"ok"`
	Tags  []string          `json:"tags"`
	Attrs map[string]uint16 `json:"attrs"`
	Raw   []byte            `json:"raw"`
	Next  *fuzzRecord       `json:"next"`
}

// FuzzCodecs: every codec either decodes bytes or returns a
// *DecodeError, never panics; the fixed-width codecs are bijections on 8
// bytes; String and Bytes give the bytes back (Bytes as a copy); and what
// the JSON codec decodes encodes to bytes that decode to the same value
// and encode the same again.
func FuzzCodecs(f *testing.F) {
	fuzzseed.Add(f, []fuzzSeed{
		{Name: "int64-min", Args: []any{Int64().Append(nil, math.MinInt64)}},
		{Name: "int64-minus-one", Args: []any{Int64().Append(nil, -1)}},
		{Name: "uint64-max", Args: []any{Uint64().Append(nil, math.MaxUint64)}},
		{Name: "float64-minus-zero", Args: []any{Float64().Append(nil, math.Copysign(0, -1))}},
		{Name: "float64-nan-payload", Args: []any{Float64().Append(nil, math.Float64frombits(0x7ff8_0000_dead_beef))}},
		{Name: "float64-minus-inf", Args: []any{Float64().Append(nil, math.Inf(-1))}},
		{Name: "short", Args: []any{[]byte{1, 2, 3}}},
		{Name: "json-record", Args: []any{JSON[fuzzRecord]().Append(nil, fuzzRecord{Name: "a<b", N: -1, F: 0.1, Tags: []string{"x"},
			Attrs: map[string]uint16{"k": 7}, Raw: []byte{0, 255}, Next: &fuzzRecord{Name: "é"}})}},
		{Name: "json-any", Args: []any{[]byte(`{"a":[1,2.5e-300,"\u00e9",null,true],"b":{"c":{}}}`)}},
		{Name: "json-bad-utf8", Args: []any{[]byte("\"\xff\\ud800\"")}},
		{Name: "json-overflow", Args: []any{[]byte(`{"attrs":{"k":70000},"n":1e30}`)}},
	})
	f.Fuzz(func(t *testing.T, b []byte) {
		fixedWidth(t, "int64", Int64(), b)
		fixedWidth(t, "uint64", Uint64(), b)
		fixedWidth(t, "float64", Float64(), b)

		s, err := String().Decode(b)
		if err != nil || s != string(b) || !bytes.Equal(String().Append(nil, s), b) {
			t.Fatalf("String: %q, %v from %q", s, err, b)
		}
		c, err := Bytes().Decode(b)
		if err != nil || !bytes.Equal(c, b) || !bytes.Equal(Bytes().Append(nil, c), b) {
			t.Fatalf("Bytes: %q, %v from %q", c, err, b)
		}
		if len(b) > 0 && &c[0] == &b[0] {
			t.Fatal("Bytes.Decode kept the backend's bytes")
		}

		jsonRoundTrip(t, JSON[fuzzRecord](), b)
		jsonRoundTrip(t, JSON[any](), b)
		jsonRoundTrip(t, JSON[[]int32](), b)
	})
}

// fixedWidth checks an 8-byte codec on b.
func fixedWidth[T any](t *testing.T, name string, c Codec[T], b []byte) {
	t.Helper()
	v, err := c.Decode(b)
	if len(b) != 8 {
		var de *DecodeError
		if !errors.As(err, &de) || de.Len != len(b) {
			t.Fatalf("%s: Decode of %d bytes = %v, %v; want a *DecodeError", name, len(b), v, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("%s: Decode(%x): %v", name, b, err)
	}
	if got := c.Append([]byte("pre"), v); !bytes.Equal(got[3:], b) || string(got[:3]) != "pre" {
		t.Fatalf("%s: %x decodes to %v, which encodes to %x", name, b, v, got)
	}
}

// jsonRoundTrip checks the JSON codec on b.
func jsonRoundTrip[T any](t *testing.T, c Codec[T], b []byte) {
	t.Helper()
	v, err := c.Decode(b)
	if err != nil {
		var de *DecodeError
		if !errors.As(err, &de) || de.Len != len(b) || de.Err == nil {
			t.Fatalf("JSON %T: Decode error %v is not a *DecodeError", v, err)
		}
		return
	}
	cc := c.(CheckedCodec[T])
	enc, err := cc.AppendChecked(nil, v)
	if err != nil {
		t.Fatalf("JSON %T: %+v decoded from %q does not encode: %v", v, v, b, err)
	}
	v2, err := c.Decode(enc)
	if err != nil || !reflect.DeepEqual(v2, v) {
		t.Fatalf("JSON %T: %q decodes to %+v (%v), want %+v", v, enc, v2, err, v)
	}
	if enc2 := c.Append(nil, v2); !bytes.Equal(enc2, enc) {
		t.Fatalf("JSON %T: encoding is not stable: %q then %q", v, enc, enc2)
	}
}

// FuzzCodecOrder: the fixed-width codecs keep numeric order in byte
// order, which Map.Range and timers rely on.
func FuzzCodecOrder(f *testing.F) {
	fuzzseed.Add(f, []fuzzSeed{
		{Name: "signs", Args: []any{uint64(1), uint64(1 << 63)}},
		{Name: "zeros", Args: []any{uint64(0), uint64(1 << 63)}},
		{Name: "infinities", Args: []any{math.Float64bits(math.Inf(-1)), math.Float64bits(math.Inf(1))}},
		{Name: "nan-and-one", Args: []any{math.Float64bits(math.NaN()), math.Float64bits(1)}},
		{Name: "adjacent", Args: []any{uint64(math.MaxInt64), uint64(math.MaxInt64) + 1}},
	})
	f.Fuzz(func(t *testing.T, a, b uint64) {
		order := func(name string, less, equal bool, ea, eb []byte) {
			t.Helper()
			c := bytes.Compare(ea, eb)
			if less && c >= 0 || equal && c != 0 || !less && !equal && c <= 0 {
				t.Fatalf("%s: %x and %x encode to %x and %x, out of order", name, a, b, ea, eb)
			}
		}
		ia, ib := int64(a), int64(b)
		order("int64", ia < ib, ia == ib, Int64().Append(nil, ia), Int64().Append(nil, ib))
		order("uint64", a < b, a == b, Uint64().Append(nil, a), Uint64().Append(nil, b))
		fa, fb := math.Float64frombits(a), math.Float64frombits(b)
		if math.IsNaN(fa) || math.IsNaN(fb) {
			return // unordered; the encodings only need to round-trip
		}
		ea, eb := Float64().Append(nil, fa), Float64().Append(nil, fb)
		if fa == fb && a != b { // -0 and +0: equal, encoded apart, -0 first
			order("float64 zero", math.Signbit(fa), false, ea, eb)
			return
		}
		order("float64", fa < fb, fa == fb, ea, eb)
	})
}
