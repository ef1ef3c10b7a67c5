package state

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
)

func roundTrip[T any](t *testing.T, c Codec[T], vals []T, eq func(a, b T) bool, ordered bool) {
	t.Helper()
	var encs [][]byte
	for _, v := range vals {
		b := c.Append([]byte("prefix"), v)
		if !bytes.HasPrefix(b, []byte("prefix")) {
			t.Fatalf("Append clobbered dst for %v", v)
		}
		got, err := c.Decode(b[len("prefix"):])
		if err != nil || !eq(got, v) {
			t.Errorf("round trip %v: got %v, %v", v, got, err)
		}
		encs = append(encs, b[len("prefix"):])
	}
	if ordered && !slices.IsSortedFunc(encs, bytes.Compare) {
		t.Errorf("encodings of ascending values are not in byte order: %x", encs)
	}
}

func TestCodecs(t *testing.T) {
	same := func(a, b int64) bool { return a == b }
	t.Run("int64", func(t *testing.T) {
		roundTrip(t, Int64(), []int64{math.MinInt64, -1 << 40, -1, 0, 1, 255, 256, 1 << 40, math.MaxInt64}, same, true)
	})
	t.Run("uint64", func(t *testing.T) {
		roundTrip(t, Uint64(), []uint64{0, 1, 255, 256, 1 << 63, math.MaxUint64}, func(a, b uint64) bool { return a == b }, true)
	})
	t.Run("float64", func(t *testing.T) {
		vals := []float64{math.Inf(-1), -math.MaxFloat64, -1.5, -math.SmallestNonzeroFloat64, 0, math.SmallestNonzeroFloat64, 1, 1.5, math.MaxFloat64, math.Inf(1)}
		roundTrip(t, Float64(), vals, func(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }, true)
		roundTrip(t, Float64(), []float64{math.Copysign(0, -1), math.NaN()}, func(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }, false)
	})
	t.Run("string", func(t *testing.T) {
		roundTrip(t, String(), []string{"", "a", "ab", "b", "\xff"}, func(a, b string) bool { return a == b }, true)
	})
	t.Run("bytes", func(t *testing.T) {
		roundTrip(t, Bytes(), [][]byte{{}, {0}, {0, 1}, {1}}, bytes.Equal, true)
		src := []byte("owned by the backend")
		got, _ := Bytes().Decode(src)
		src[0] = 'X'
		if got[0] != 'o' {
			t.Error("Bytes().Decode does not copy")
		}
	})
	t.Run("json", func(t *testing.T) {
		type point struct {
			X, Y int
			Tag  string
		}
		roundTrip(t, JSON[point](), []point{{}, {1, -2, "a"}}, func(a, b point) bool { return a == b }, false)
	})
}

func TestCodecErrors(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"int64 short", func() error { _, err := Int64().Decode([]byte{1, 2}); return err }(), "state: decode int64: want 8 bytes, got 2"},
		{"uint64 long", func() error { _, err := Uint64().Decode(make([]byte, 9)); return err }(), "state: decode uint64: want 8 bytes, got 9"},
		{"float64 empty", func() error { _, err := Float64().Decode(nil); return err }(), "state: decode float64: want 8 bytes, got 0"},
		{"json", func() error { _, err := JSON[map[string]int]().Decode([]byte("{oops")); return err }(), "state: decode json map[string]int from 5 bytes: invalid character"},
		{"json encode", func() error {
			_, err := JSON[float64]().(CheckedCodec[float64]).AppendChecked(nil, math.NaN())
			return err
		}(), "state: encode json float64: json: unsupported value: NaN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.err == nil || !strings.Contains(tt.err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", tt.err, tt.want)
			}
		})
	}
	var de *DecodeError
	if _, err := Int64().Decode(nil); !errors.As(err, &de) || de.Codec != "int64" {
		t.Errorf("not a *DecodeError: %v", err)
	}
}
