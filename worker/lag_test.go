package worker

import (
	"context"
	"io"
	"log/slog"
	"reflect"
	"testing"

	"github.com/weirstream/weir/checkpoint"
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
