package engine_test

import (
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
)

// TestDrainedJobOutlivesTheBrokersMemory: a job drained, and the
// transactional system then forgot every transaction it committed (a Kafka
// broker expires a transactional id unused for
// transactional.id.expiration.ms, 7 days by default). Restarted, the job
// restores its final checkpoint by the commit record the drain wrote, and
// the output stays exactly once. Without that record nothing tells whether
// the final checkpoint's output was committed, and the restart refuses to
// guess instead of restoring an earlier checkpoint (which wrote it twice
// before issue 21).
func TestDrainedJobOutlivesTheBrokersMemory(t *testing.T) {
	for _, keepRecord := range []bool{true, false} {
		name := "with the commit record"
		if !keepRecord {
			name = "commit record lost"
		}
		t.Run(name, func(t *testing.T) {
			st, store, logs := checkpoint.NewMemory(checkpoint.MemoryOptions{}), newTxnStore[update](), &logBuffer{}
			// The drain comes after records were processed, with checkpoints
			// far apart: the final checkpoint has transactions of its own
			// (a drain right after a checkpoint has none to record).
			run := func(records int64) error {
				drain := make(chan struct{})
				var seen atomic.Int64
				after := func(int64) error {
					if seen.Add(1) == records {
						close(drain)
					}
					return nil
				}
				return engine.Run(t.Context(), countJob(t, 1<<40, 10, 1, after, store.sink()), engine.Config{
					Tasks: []int{0}, Storage: st, StateDir: t.TempDir(), Drain: drain,
					Checkpoint: checkpoint.Config{Interval: time.Hour}, MaxRestarts: 1, Logger: slog.New(slog.NewTextHandler(logs, nil)),
				})
			}
			if err := run(3000); err != nil {
				t.Fatal(err)
			}
			l, err := checkpoint.ListTask(t.Context(), st, "count", 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(l.CommitRecords) != 1 {
				t.Fatalf("the drain wrote %d commit records, want 1 (%v)\n%s", len(l.CommitRecords), l.CommitRecords, logs)
			}
			r, err := checkpoint.ReadCommitRecord(t.Context(), st, "count", 0, l.CommitRecords[0])
			if err != nil {
				t.Fatal(err)
			}
			final := l.Completed[len(l.Completed)-1]
			if r.Checkpoint != final || len(r.Committed) == 0 {
				t.Fatalf("commit record of checkpoint %d with %d transactions, want the final checkpoint %d's", r.Checkpoint, len(r.Committed), final)
			}
			if !keepRecord {
				if err := st.Delete(t.Context(), l.CommitRecords[0]); err != nil {
					t.Fatal(err)
				}
			}
			store.forget()
			committed := len(store.visible())

			err = run(2000)
			if !keepRecord {
				if !errors.Is(err, engine.ErrNoValidCheckpoint) || !strings.Contains(err.Error(), "neither the broker nor checkpoint storage keeps a record") {
					t.Fatalf("want ErrNoValidCheckpoint saying nothing tells, got %v\n%s", err, logs)
				}
				if n := len(store.visible()) - committed; n != 0 {
					t.Fatalf("the refused restore committed %d records", n)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v\n%s", err, logs)
			}
			ids, _, err := checkpoint.ListCheckpoints(t.Context(), st, "count", 0)
			if err != nil {
				t.Fatal(err)
			}
			m, err := checkpoint.ReadManifest(t.Context(), st, "count", 0, ids[len(ids)-1])
			if err != nil {
				t.Fatal(err)
			}
			checkExactlyOnce(t, store.visible(), sourceOffset(t, m), 10, 1)
		})
	}
}
