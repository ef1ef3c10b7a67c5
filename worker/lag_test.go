package worker

import (
	"context"
	"io"
	"log/slog"
	"reflect"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/testcluster"
	"github.com/weirstream/weir/source"
	"github.com/weirstream/weir/worker/internal/status"
)

// TestPurgeInternalTopics: the lag committer deletes a task's internal
// records only before the least positions of its last DefaultRetained
// completed checkpoints since its last restore, never input topics', and
// per task. (The worker does not give it internal topics yet.)
func TestPurgeInternalTopics(t *testing.T) {
	l := newLagCommitter(nil, slog.New(slog.NewTextHandler(io.Discard, nil)), []string{"rep"})
	var purged [][]checkpoint.SourcePosition
	l.purger = func(_ context.Context, ps []checkpoint.SourcePosition) error {
		purged = append(purged, ps)
		return nil
	}
	l.c = nil
	complete := func(task int, in, rep int64) {
		l.offer(task, []checkpoint.SourcePosition{
			{Source: "in", Topic: "input", Partition: int32(task), Offset: in},
			{Source: "rep-read", Topic: "rep", Partition: int32(task), Offset: rep},
		})
		l.purgeNow(context.Background())
	}
	for i := range int64(checkpoint.DefaultRetained - 1) {
		complete(0, 100*i, 10*i)
	}
	if len(purged) != 0 {
		t.Fatalf("purged %v before %d checkpoints completed", purged, checkpoint.DefaultRetained)
	}
	complete(0, 1000, 50) // the least of the last three is at 0: nothing to delete below it
	complete(0, 1100, 60) // now the least is at 10
	complete(1, 5, 7)
	// A restore that went back (to 5, below the last three): its history
	// starts again, and the least counts, not the oldest.
	l.restored(0)
	complete(0, 1200, 5)
	complete(0, 1300, 70)
	complete(0, 1400, 80)
	want := [][]checkpoint.SourcePosition{
		{{Topic: "rep", Partition: 0, Offset: 0}},
		{{Topic: "rep", Partition: 0, Offset: 10}},
		{{Topic: "rep", Partition: 0, Offset: 5}},
	}
	if !reflect.DeepEqual(purged, want) {
		t.Fatalf("purged %v, want %v", purged, want)
	}
}

// TestLagCollectorShowsBlockedRecords: records behind another producer's
// open transaction are past the partition's last stable offset: no
// read_committed reader sees them, so the lag is 0 while they wait. The
// collector reports them apart, so that a transaction that hangs shows.
func TestLagCollectorShowsBlockedRecords(t *testing.T) {
	c := testcluster.Kafka(t)
	topic := testcluster.UniqueName(t, "in")
	c.CreateTopics(t, 1, topic)
	ctx := t.Context()
	plain := c.Client(t, kgo.DefaultProduceTopic(topic))
	if err := plain.ProduceSync(ctx, kgo.StringRecord("before")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	txn := c.Client(t, kgo.DefaultProduceTopic(topic), kgo.TransactionalID(testcluster.UniqueName(t, "txn")))
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := txn.ProduceSync(ctx, kgo.StringRecord("open")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := plain.ProduceSync(ctx, kgo.StringRecord("after")).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cm, err := source.NewCommitter(c.Brokers, testcluster.UniqueName(t, "lag"))
	if err != nil {
		t.Fatal(err)
	}
	defer cm.Close()
	w := &worker{cfg: DefaultConfig(), tasks: map[int]*status.Task{0: {State: status.Running,
		Positions: []checkpoint.SourcePosition{{Source: "in", Topic: topic, Partition: 0, Offset: 1}}}}}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(newLagCollector(w, cm))
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			got[mf.GetName()] = m.GetGauge().GetValue()
		}
	}
	// The open transaction's record and the five after it.
	if got["weir_consumer_lag_records"] != 0 || got["weir_consumer_blocked_records"] != 6 {
		t.Fatalf("metrics %v: want a lag of 0 and 6 records blocked", got)
	}
}
