package clicks_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/examples/clicks"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/stream"
)

func TestDecode(t *testing.T) {
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	c, err := clicks.Decode(&kgo.Record{Key: []byte("ann"), Value: []byte(`{"user":"ann","url":"/a","at":"2026-12-03T10:00:00Z"}`)})
	if err != nil || c.User != "ann" || !c.At.Equal(at) {
		t.Fatalf("Decode = %+v, %v", c, err)
	}
	for _, v := range []string{`{"user":"bob","at":"2026-12-03T10:00:00Z"}`, `{"user":"ann"}`, `not json`} {
		if _, err := clicks.Decode(&kgo.Record{Key: []byte("ann"), Value: []byte(v)}); err == nil {
			t.Errorf("Decode(%s) accepted it", v)
		}
	}
}

// sink keeps every record written, and each task's last result per minute.
type sink struct {
	mu   sync.Mutex
	outs []clicks.Out
}

type writer struct{ s *sink }

func (w writer) Write(_ context.Context, o clicks.Out) error {
	w.s.mu.Lock()
	w.s.outs = append(w.s.outs, o)
	w.s.mu.Unlock()
	return nil
}
func (writer) PreCommit(context.Context, checkpoint.ID) ([]checkpoint.Committable, error) {
	return nil, nil
}
func (writer) Commit(context.Context, checkpoint.ID) error { return nil }
func (writer) Close() error                                { return nil }

// TestClicksPerMinute runs the job on shuffled clicks (within the
// out-of-orderness), a few late within the allowed lateness and a few too
// late, and compares each user's minutes with counts made offline.
func TestClicksPerMinute(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	start := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	users := []string{"ann", "bob", "cid", "dee"}
	var input []clicks.Click
	want := map[string]int64{} // user/minute -> clicks
	tooLate := 0
	for i := range 20000 {
		at := start.Add(time.Duration(i) * 50 * time.Millisecond)
		c := clicks.Click{User: users[rng.IntN(len(users))], URL: "/", At: at.Add(-time.Duration(rng.Int64N(4000)) * time.Millisecond)}
		switch r := rng.IntN(100); {
		case i > 3000 && r == 0:
			// 4 to 5 minutes late: past the lateness, even with the
			// watermark a poll (1024 clicks, 51 s) behind.
			c.At = at.Add(-4*time.Minute - time.Duration(rng.Int64N(60000))*time.Millisecond)
			tooLate++
		case i > 3000 && r <= 3:
			// 20 to 25 s late: within the lateness, whether or not its
			// minute fired already.
			c.At = at.Add(-20*time.Second - time.Duration(rng.Int64N(5000))*time.Millisecond)
			want[fmt.Sprintf("%s/%s", c.User, c.At.Truncate(time.Minute).Format(time.RFC3339))]++
		default:
			want[fmt.Sprintf("%s/%s", c.User, c.At.Truncate(time.Minute).Format(time.RFC3339))]++
		}
		input = append(input, c)
	}
	s := &sink{}
	job := stream.NewJob("clicks")
	in := stream.SourceWithWatermarks(job, clicks.SourceName, stream.SliceSource([][]clicks.Click{input}), clicks.EventTime)
	stream.Sink(clicks.PerMinute(in), clicks.SinkName, engine.SinkFactory[clicks.Out](func(context.Context, engine.TaskInfo, []checkpoint.Committable) (engine.SinkWriter[clicks.Out], error) {
		return writer{s}, nil
	}))
	plan, err := job.Build()
	if err != nil {
		t.Fatal(err)
	}
	if err := engine.Run(t.Context(), plan, engine.Config{Tasks: []int{0}, Storage: checkpoint.NewMemory(checkpoint.MemoryOptions{}), StateDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	late := 0
	for _, o := range s.outs {
		if o.Late != nil {
			late++
			continue
		}
		k := fmt.Sprintf("%s/%s", o.User, o.Minute.Format(time.RFC3339))
		if o.Clicks < got[k] {
			t.Fatalf("%s went from %d clicks back to %d", k, got[k], o.Clicks)
		}
		got[k] = o.Clicks
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%s: %d clicks, want %d", k, got[k], n)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d user minutes, want %d", len(got), len(want))
	}
	if late != tooLate {
		t.Errorf("%d late clicks, want %d", late, tooLate)
	}
	t.Logf("%d clicks, %d user minutes, %d results, %d too late", len(input), len(want), len(s.outs)-late, late)
}
