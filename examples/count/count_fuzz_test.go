package count_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/examples/count"
)

// Fuzz target for the count job's record codec. Its seeds run with plain
// go test; to search:
//
//	go test -run '^$' -fuzz '^FuzzDecode$' -fuzztime 5m -parallel 1 ./examples/count

// fuzzSeed is one seed: the target's arguments, in order, and the name of
// its file under testdata/fuzz/<target>/.
type fuzzSeed struct {
	name string
	args []any
}

// addSeeds adds the seeds to f. With WEIR_WRITE_FUZZ_SEEDS=1 it also
// writes them under testdata/fuzz/<target>/, where they stay.
func addSeeds(f *testing.F, seeds []fuzzSeed) {
	f.Helper()
	write := os.Getenv("WEIR_WRITE_FUZZ_SEEDS") == "1"
	dir := filepath.Join("testdata", "fuzz", f.Name())
	for _, s := range seeds {
		f.Add(s.args...)
		if !write {
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			f.Fatal(err)
		}
		b := []byte("go test fuzz v1\n")
		for _, a := range s.args {
			switch v := a.(type) {
			case []byte:
				b = fmt.Appendf(b, "[]byte(%q)\n", v)
			default:
				b = fmt.Appendf(b, "%T(%v)\n", v, v)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, s.name), b, 0o644); err != nil {
			f.Fatal(err)
		}
	}
}

// FuzzDecode: no record makes Decode panic; it takes exactly the records
// with a key and a decimal int64 value. And an output record, whatever
// its key and numbers, is keyed by its key and holds what encoding/json
// writes of it, byte for byte (the encoder writes plain keys by hand).
func FuzzDecode(f *testing.F) {
	addSeeds(f, []fuzzSeed{
		{"plain", []any{[]byte("k17"), []byte("12345"), int64(3), int64(12345)}},
		{"negative", []any{[]byte("k0"), []byte("-3"), int64(-1), int64(-1 << 63)}},
		{"no-key", []any{[]byte(""), []byte("5"), int64(0), int64(0)}},
		{"not-a-number", []any{[]byte("k1"), []byte("1.5"), int64(1), int64(1)}},
		{"overflow", []any{[]byte("k1"), []byte("9223372036854775808"), int64(1<<63 - 1), int64(1)}},
		{"plus-sign", []any{[]byte("k1"), []byte("+7"), int64(1), int64(7)}},
		{"spaces", []any{[]byte("k1"), []byte(" 7\n"), int64(1), int64(7)}},
		{"escaped-key", []any{[]byte("a\"b\\c<&>\u2028\xff\t"), []byte("0"), int64(2), int64(9)}},
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
