package count_test

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/examples/count"
	"github.com/weirstream/weir/internal/fuzzseed"
)

// Fuzz target for the count job's record codec. Its seeds run with plain
// go test; to search:
//
//	go test -run '^$' -fuzz '^FuzzDecode$' -fuzztime 5m -parallel 1 ./examples/count

// fuzzSeed is one seed of a fuzz target (internal/fuzzseed).
type fuzzSeed = fuzzseed.Seed

// FuzzDecode: no record makes Decode panic; it takes exactly the records
// with a key and a decimal int64 value. And an output record, whatever
// its key and numbers, is keyed by its key and holds what encoding/json
// writes of it, byte for byte (the encoder writes plain keys by hand).
func FuzzDecode(f *testing.F) {
	fuzzseed.Add(f, []fuzzSeed{
		{Name: "plain", Args: []any{[]byte("k17"), []byte("12345"), int64(3), int64(12345)}},
		{Name: "negative", Args: []any{[]byte("k0"), []byte("-3"), int64(-1), int64(-1 << 63)}},
		{Name: "no-key", Args: []any{[]byte(""), []byte("5"), int64(0), int64(0)}},
		{Name: "not-a-number", Args: []any{[]byte("k1"), []byte("1.5"), int64(1), int64(1)}},
		{Name: "overflow", Args: []any{[]byte("k1"), []byte("9223372036854775808"), int64(1<<63 - 1), int64(1)}},
		{Name: "plus-sign", Args: []any{[]byte("k1"), []byte("+7"), int64(1), int64(7)}},
		{Name: "spaces", Args: []any{[]byte("k1"), []byte(" 7\n"), int64(1), int64(7)}},
		{Name: "escaped-key", Args: []any{[]byte("a\"b\\c<&>\u2028\xff\t"), []byte("0"), int64(2), int64(9)}},
	})
	f.Fuzz(func(t *testing.T, key, value []byte, n, sum int64) {
		in, err := count.Decode(&kgo.Record{Key: key, Value: value})
		want, perr := strconv.ParseInt(string(value), 10, 64)
		if ok := len(key) > 0 && perr == nil; ok != (err == nil) {
			t.Fatalf("Decode(%q, %q) = %+v, %v", key, value, in, err)
		}
		if err == nil && (in.Key != string(key) || in.N != want) {
			t.Fatalf("Decode(%q, %q) = %+v", key, value, in)
		}

		o := count.Out{Key: string(key), Count: n, Sum: sum}
		r, err := count.Encode(o)
		if err != nil {
			t.Fatalf("Encode(%+v): %v", o, err)
		}
		js, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(r.Key, key) || !bytes.Equal(r.Value, js) {
			t.Fatalf("Encode(%+v) = key %q value %s; want value %s", o, r.Key, r.Value, js)
		}
	})
}
