package source_test

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/internal/testcluster"
	"github.com/weirstream/weir/sink"
	"github.com/weirstream/weir/source"
)

// TestWatermarkMarkers: two tasks write records and their watermarks into
// a topic of two partitions through a sink with Watermarks, in
// transactions; a reader of each partition with Watermarks returns the
// records only, and its split's watermark is the least of the two tasks'
// (nothing before both wrote one, idle ones left out), resumed from the
// reader's positions on restore. A watermark that did not move writes
// nothing.
func TestWatermarkMarkers(t *testing.T) {
	c := testcluster.Kafka(t)
	topic := testcluster.UniqueName(t, "repartition")
	createTopics(t, c, 2, topic)
	ctx := testCtx(t)

	scfg := sink.Config[string]{
		Brokers:               c.Brokers,
		Topic:                 topic,
		Encode:                func(s string) (*kgo.Record, error) { return &kgo.Record{Key: []byte(s), Value: []byte(s)}, nil },
		TransactionalIDPrefix: testcluster.UniqueName(t, "txn"),
		Watermarks:            true,
	}
	f, err := sink.Kafka(scfg)
	if err != nil {
		t.Fatal(err)
	}
	writers := make([]engine.SinkWriter[string], 2)
	for task := range writers {
		w, err := f.Open(ctx, engine.TaskInfo{Job: "job", Task: task, Operator: "write"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		writers[task] = w
	}
	// checkpoint writes vals and then watermark wm (if set) as task's
	// checkpoint id, and commits it.
	checkpoint := func(task int, id checkpoint.ID, wm *engine.Watermark, vals ...string) {
		t.Helper()
		w := writers[task]
		for _, v := range vals {
			if err := w.Write(ctx, v); err != nil {
				t.Fatal(err)
			}
		}
		if wm != nil {
			w.(engine.WatermarkWriter).Watermark(*wm)
		}
		if _, err := w.PreCommit(ctx, id); err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	rcfg := source.Config[string]{Brokers: c.Brokers, Topics: []string{topic}, Decode: str, Watermarks: true}
	readers := []engine.SourceReader[string]{openReader(t, rcfg, 0, nil), openReader(t, rcfg, 1, nil)}
	var got []string
	// until polls both readers until they returned n records in all and
	// each split's watermark is want.
	until := func(n int, want engine.Watermark) {
		t.Helper()
		deadline := time.Now().Add(waitFor)
		for {
			done := len(got) >= n
			var wms []engine.Watermark
			for p, r := range readers {
				var b engine.Batch[string]
				if err := r.Poll(ctx, &b); err != nil {
					t.Fatal(err)
				}
				got = append(got, b.Values...)
				for _, pos := range b.Positions {
					if pos.Partition != int32(p) {
						t.Fatalf("reader %d returned %v", p, pos)
					}
				}
				w := r.(engine.WatermarkReader).SplitWatermark(topic, int32(p))
				wms = append(wms, w)
				done = done && w == want
			}
			if done && len(got) == n {
				return
			}
			if len(got) > n || time.Now().After(deadline) {
				t.Fatalf("records %v, watermarks %+v; want %d records, watermarks %+v", got, wms, n, want)
			}
		}
	}
	wm := func(ms int64, idle bool) *engine.Watermark { return &engine.Watermark{Millis: ms, Idle: idle} }

	checkpoint(0, 1, wm(100, false), "a", "b", "c", "d")
	until(4, engine.Watermark{Millis: math.MinInt64}) // task 1 has not written one
	checkpoint(1, 1, wm(50, false), "e")
	until(5, engine.Watermark{Millis: 50})
	checkpoint(1, 2, wm(150, true)) // task 1 idle: task 0's counts
	until(5, engine.Watermark{Millis: 100})
	checkpoint(0, 2, wm(200, true)) // both idle
	until(5, engine.Watermark{Millis: 200, Idle: true})
	checkpoint(1, 3, wm(300, false), "f")
	until(6, engine.Watermark{Millis: 300})
	slices.Sort(got)
	if want := []string{"a", "b", "c", "d", "e", "f"}; !slices.Equal(got, want) {
		t.Fatalf("records %v, want %v: markers must not be records", got, want)
	}

	// Unmoved watermarks write nothing: no transaction, no offset.
	adm := kadm.NewClient(c.Client(t))
	ends := func() kadm.ListedOffsets {
		o, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	before := ends()
	checkpoint(0, 3, wm(200, true))
	checkpoint(1, 4, wm(300, false))
	after := ends()
	for p := range int32(2) {
		b, _ := before.Lookup(topic, p)
		a, _ := after.Lookup(topic, p)
		if a.Offset != b.Offset {
			t.Errorf("partition %d: end offset %d after unmoved watermarks, %d before", p, a.Offset, b.Offset)
		}
	}

	// A restored reader resumes each task's watermark.
	for p, r := range readers {
		pos := r.Positions()
		if len(pos) != 1 || len(pos[0].Upstream) != 2 {
			t.Fatalf("positions %+v: want the two tasks' watermarks", pos)
		}
		r.Close()
		readers[p] = openReader(t, rcfg, p, pos)
		if w := readers[p].(engine.WatermarkReader).SplitWatermark(topic, int32(p)); w != (engine.Watermark{Millis: 300}) {
			t.Fatalf("restored reader %d: watermark %+v before a poll, want 300", p, w)
		}
	}
	checkpoint(0, 4, wm(250, false), "g")
	until(7, engine.Watermark{Millis: 250})
}
