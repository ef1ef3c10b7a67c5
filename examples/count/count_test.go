package count_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/examples/count"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/stream"
)

func TestDecodeAndEncode(t *testing.T) {
	for _, tc := range []struct {
		key, value string
		want       count.In
		err        bool
	}{
		{"k17", "12345", count.In{Key: "k17", N: 12345}, false},
		{"k0", "-3", count.In{Key: "k0", N: -3}, false},
		{"", "5", count.In{}, true},
		{"k1", "x", count.In{}, true},
		{"k1", "", count.In{}, true},
		{"k1", "1.5", count.In{}, true},
		{"k1", "99999999999999999999", count.In{}, true},
	} {
		got, err := count.Decode(&kgo.Record{Key: []byte(tc.key), Value: []byte(tc.value)})
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("Decode(%q, %q) = %+v, %v; want %+v, error %v", tc.key, tc.value, got, err, tc.want, tc.err)
		}
	}
	r, err := count.Encode(count.Out{Key: "k17", Count: 3, Sum: 12345})
	if err != nil {
		t.Fatal(err)
	}
	if string(r.Key) != "k17" || string(r.Value) != `{"key":"k17","count":3,"sum":12345}` {
		t.Errorf("Encode: key %q value %s", r.Key, r.Value)
	}
	// The hand-written encoding is encoding/json's, for every kind of key.
	for _, o := range []count.Out{
		{Key: "k17", Count: 3, Sum: -12345}, {Key: "", Count: 1}, {Key: `a"b\c`, Count: 2, Sum: 9},
		{Key: "<&>", Count: 1, Sum: 1}, {Key: "tab\there\n", Count: 1}, {Key: "héllo", Count: 7, Sum: 8},
		{Key: "k", Count: math.MaxInt64, Sum: math.MinInt64},
	} {
		r, err := count.Encode(o)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(o)
		if string(r.Key) != o.Key || string(r.Value) != string(want) {
			t.Errorf("Encode(%+v): key %q value %s, want %s", o, r.Key, r.Value, want)
		}
	}
}

// collect is a sink that keeps what each checkpoint committed.
type collect struct {
	mu  sync.Mutex
	out []count.Out
}

type collectWriter struct {
	c       *collect
	pending []count.Out
}

func (c *collect) factory() engine.SinkFactory[count.Out] {
	return func(context.Context, engine.TaskInfo, []checkpoint.Committable) (engine.SinkWriter[count.Out], error) {
		return &collectWriter{c: c}, nil
	}
}

func (w *collectWriter) Write(_ context.Context, o count.Out) error {
	w.pending = append(w.pending, o)
	return nil
}

func (w *collectWriter) PreCommit(context.Context, checkpoint.ID) ([]checkpoint.Committable, error) {
	return nil, nil
}

func (w *collectWriter) Commit(context.Context, checkpoint.ID) error {
	w.c.mu.Lock()
	w.c.out = append(w.c.out, w.pending...)
	w.c.mu.Unlock()
	w.pending = nil
	return nil
}

func (w *collectWriter) Close() error { return nil }

// TestBuild runs the job on two partitions of records, each key in one
// partition as Kafka's partitioner would place it, and checks that every key
// emits the counts 1..n once each, in order, with running sums.
func TestBuild(t *testing.T) {
	const perPart, keys = 3000, 10
	parts := make([][]count.In, 2)
	wantSums := map[string][]int64{} // running sums per key, in order
	for p := range parts {
		for i := range perPart {
			k := fmt.Sprintf("k%d", p+2*(i%keys))
			n := int64(i%201 - 100)
			parts[p] = append(parts[p], count.In{Key: k, N: n})
			var prev int64
			if s := wantSums[k]; len(s) > 0 {
				prev = s[len(s)-1]
			}
			wantSums[k] = append(wantSums[k], prev+n)
		}
	}
	out := &collect{}
	job := stream.NewJob("count-test")
	stream.Sink(count.Counts(stream.Source(job, count.SourceName, stream.SliceSource(parts))), count.SinkName, out.factory())
	plan, err := job.Build()
	if err != nil {
		t.Fatal(err)
	}
	// The names identify state in checkpoints; they must not change. (KeyBy
	// is no operator of its own in the plan: "by-key" does not show here.)
	if got, want := plan.Operators(), []string{"input", "count", "output"}; !slices.Equal(got, want) {
		t.Fatalf("operators %q, want %q", got, want)
	}
	err = engine.Run(t.Context(), plan, engine.Config{
		Tasks:      []int{0, 1},
		Storage:    checkpoint.NewMemory(checkpoint.MemoryOptions{}),
		Checkpoint: checkpoint.Config{Interval: 5 * time.Millisecond},
		StateDir:   t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]int64{}
	for _, o := range out.out {
		if want := int64(len(got[o.Key]) + 1); o.Count != want {
			t.Fatalf("%s: count %d, want %d", o.Key, o.Count, want)
		}
		got[o.Key] = append(got[o.Key], o.Sum)
	}
	if len(got) != len(wantSums) {
		t.Errorf("%d keys in the output, want %d", len(got), len(wantSums))
	}
	for k, want := range wantSums {
		if !slices.Equal(got[k], want) {
			t.Errorf("%s: %d outputs, running sums differ from the input's", k, len(got[k]))
		}
	}
}
