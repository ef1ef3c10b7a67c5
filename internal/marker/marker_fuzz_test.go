package marker

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// Fuzz targets for the watermark marker, which a task reads from a
// repartition topic that any producer could have written to. Their
// seeds run with plain go test; to search, run one at a time:
//
//	go test -run '^$' -fuzz '^FuzzDecode$' -fuzztime 5m -parallel 1 ./internal/marker

// fuzzSeed is one seed of a fuzz target: its arguments, in the target's
// order, and the name of its file under testdata/fuzz/<target>/.
type fuzzSeed struct {
	name string
	args []any
}

// addSeeds adds the seeds to f. With WEIR_WRITE_FUZZ_SEEDS=1 it also
// writes them under testdata/fuzz/<target>/, where they stay: the valid
// ones freeze what today's encoder writes, which markers already in
// topics hold.
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
		if err := os.WriteFile(filepath.Join(dir, s.name), corpusFile(s.args...), 0o644); err != nil {
			f.Fatal(err)
		}
	}
}

// corpusFile is args in the "go test fuzz v1" format.
func corpusFile(args ...any) []byte {
	b := []byte("go test fuzz v1\n")
	for _, a := range args {
		switch v := a.(type) {
		case []byte:
			b = fmt.Appendf(b, "[]byte(%q)\n", v)
		case string:
			b = fmt.Appendf(b, "string(%q)\n", v)
		default:
			b = fmt.Appendf(b, "%T(%v)\n", v, v)
		}
	}
	return b
}

func value(m Mark) []byte { return Record("t", 0, m).Value }

// FuzzDecode: no value makes Decode panic; a value it accepts names a
// task below a positive task count, and encodes to a marker that decodes
// to the same mark; the encoding of a mark is the only one Decode reads
// as that mark, but for varints written longer than they need.
func FuzzDecode(f *testing.F) {
	addSeeds(f, []fuzzSeed{
		{"first", []any{value(Mark{Task: 0, Tasks: 1, Millis: 1767225600000})}},
		{"none-yet", []any{value(Mark{Task: 3, Tasks: 4, Millis: math.MinInt64})}},
		{"end-idle", []any{value(Mark{Task: 199, Tasks: 200, Millis: math.MaxInt64, Idle: true})}},
		{"many-tasks", []any{value(Mark{Task: math.MaxInt32 - 1, Tasks: math.MaxInt32, Millis: -1})}},
		{"empty", []any{[]byte{}}},
		{"version-2", []any{[]byte{2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}}},
		{"task-not-below-tasks", []any{[]byte{1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}}},
		{"no-tasks", []any{[]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}}},
		{"idle-2", []any{[]byte{1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 2}}},
		{"short", []any{[]byte{1, 0, 1, 0, 0, 0}}},
		{"long-varint", []any{[]byte{1, 0x80, 0x00, 0x81, 0x00, 0, 0, 0, 0, 0, 0, 0, 9, 1}}},
		{"huge-tasks", []any{[]byte{1, 0, 0x80, 0x80, 0x80, 0x80, 0x08, 0, 0, 0, 0, 0, 0, 0, 0, 0}}},
	})
	f.Fuzz(func(t *testing.T, v []byte) {
		m, err := Decode(v)
		if err != nil {
			return
		}
		if m.Tasks <= 0 || m.Tasks > math.MaxInt32 || m.Task < 0 || m.Task >= m.Tasks {
			t.Fatalf("%x decodes to %+v", v, m)
		}
		r := Record("topic", 5, m)
		if !Is(r) || r.Partition != 5 {
			t.Fatalf("the marker of %+v is not one: %+v", m, r)
		}
		m2, err := Decode(r.Value)
		if err != nil || m2 != m {
			t.Fatalf("%+v encodes to %x, which decodes to %+v, %v", m, r.Value, m2, err)
		}
		if len(r.Value) == len(v) && !bytes.Equal(r.Value, v) {
			t.Fatalf("%x and %x both decode to %+v", v, r.Value, m)
		}
	})
}

// FuzzRecord: every mark a task can write decodes to itself.
func FuzzRecord(f *testing.F) {
	addSeeds(f, []fuzzSeed{
		{"first", []any{0, 1, int64(0), false}},
		{"last-of-many", []any{math.MaxInt32 - 1, math.MaxInt32, int64(math.MaxInt64), true}},
		{"none-yet", []any{2, 3, int64(math.MinInt64), false}},
	})
	f.Fuzz(func(t *testing.T, task, tasks int, millis int64, idle bool) {
		if tasks <= 0 || tasks > math.MaxInt32 || task < 0 || task >= tasks {
			return // not a mark a job writes: Record does not check
		}
		m := Mark{Task: task, Tasks: tasks, Millis: millis, Idle: idle}
		got, err := Decode(Record("t", 0, m).Value)
		if err != nil || got != m {
			t.Fatalf("%+v decodes to %+v, %v", m, got, err)
		}
	})
}
