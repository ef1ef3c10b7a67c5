package marker

import (
	"bytes"
	"math"
	"testing"

	"github.com/weirstream/weir/internal/fuzzseed"
)

// Fuzz targets for the watermark marker, which a task reads from a
// repartition topic that any producer could have written to. Their
// seeds run with plain go test; to search, run one at a time:
//
//	go test -run '^$' -fuzz '^FuzzDecode$' -fuzztime 5m -parallel 1 ./internal/marker

// fuzzSeed is one seed of a fuzz target (internal/fuzzseed).
type fuzzSeed = fuzzseed.Seed

func value(m Mark) []byte { return Record("t", 0, m).Value }

// FuzzDecode: no value makes Decode panic; a value it accepts names a
// task below a positive task count, and encodes to a marker that decodes
// to the same mark; the encoding of a mark is the only one Decode reads
// as that mark, but for varints written longer than they need.
func FuzzDecode(f *testing.F) {
	fuzzseed.Add(f, []fuzzSeed{
		{Name: "first", Args: []any{value(Mark{Task: 0, Tasks: 1, Millis: 1767225600000})}},
		{Name: "none-yet", Args: []any{value(Mark{Task: 3, Tasks: 4, Millis: math.MinInt64})}},
		{Name: "end-idle", Args: []any{value(Mark{Task: 199, Tasks: 200, Millis: math.MaxInt64, Idle: true})}},
		{Name: "many-tasks", Args: []any{value(Mark{Task: math.MaxInt32 - 1, Tasks: math.MaxInt32, Millis: -1})}},
		{Name: "empty", Args: []any{[]byte{}}},
		{Name: "version-2", Args: []any{[]byte{2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}}},
		{Name: "task-not-below-tasks", Args: []any{[]byte{1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}}},
		{Name: "no-tasks", Args: []any{[]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}}},
		{Name: "idle-2", Args: []any{[]byte{1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 2}}},
		{Name: "short", Args: []any{[]byte{1, 0, 1, 0, 0, 0}}},
		{Name: "long-varint", Args: []any{[]byte{1, 0x80, 0x00, 0x81, 0x00, 0, 0, 0, 0, 0, 0, 0, 9, 1}}},
		{Name: "huge-tasks", Args: []any{[]byte{1, 0, 0x80, 0x80, 0x80, 0x80, 0x08, 0, 0, 0, 0, 0, 0, 0, 0, 0}}},
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
	fuzzseed.Add(f, []fuzzSeed{
		{Name: "first", Args: []any{0, 1, int64(0), false}},
		{Name: "last-of-many", Args: []any{math.MaxInt32 - 1, math.MaxInt32, int64(math.MaxInt64), true}},
		{Name: "none-yet", Args: []any{2, 3, int64(math.MinInt64), false}},
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
