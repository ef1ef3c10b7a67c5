package worker

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/examples/count"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/stream"
	"github.com/weirstream/weir/worker/internal/status"
)

func TestLockStateDirGivesEachWorkerItsOwnSlot(t *testing.T) {
	dir := t.TempDir()
	a, unlockA, err := lockStateDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, unlockB, err := lockStateDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Fatalf("two workers got the same slot %s", a)
	}
	unlockA()
	// A restarted worker gets the freed slot back, and with it its files.
	c, unlockC, err := lockStateDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer unlockB()
	defer unlockC()
	if c != a {
		t.Errorf("after the first worker left, a new one got %s, want its slot %s", c, a)
	}
}

// TestCleanPassDeletesTheStateOfTasksThatLeft: the local state of a task
// that stopped here longer ago than the delay goes; that of a task running,
// one that stopped recently, or anything that is not a task's stays.
func TestCleanPassDeletesTheStateOfTasksThatLeft(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"task-1", "task-2", "task-3", "task-4", "other"} {
		if err := os.MkdirAll(filepath.Join(dir, d, "op"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	job := stream.NewJob("count")
	stream.Sink(count.Counts(stream.Source(job, count.SourceName, stream.GeneratorSource(0, func(int, int64) count.In { return count.In{} }))), count.SinkName, stream.DiscardSink[count.Out]())
	plan, err := job.Build()
	if err != nil {
		t.Fatal(err)
	}
	r, err := engine.NewRunner(t.Context(), plan, engine.Config{Storage: checkpoint.NewMemory(checkpoint.MemoryOptions{}), StateDir: t.TempDir()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := &worker{runner: r, log: newLogger(nopWriter{}, "info"), started: time.Now(), tasks: map[int]*status.Task{
		1: {ID: 1, State: status.Stopped, Since: time.Now().Add(-time.Hour)},
		2: {ID: 2, State: status.Running, Since: time.Now().Add(-time.Hour)},
		3: {ID: 3, State: status.Stopped, Since: time.Now()},
		// task-4: left by an earlier process on this slot, which this one
		// has run for less than the delay.
	}}
	w.cleanPass(dir, 10*time.Minute)
	for d, want := range map[string]bool{"task-1": false, "task-2": true, "task-3": true, "task-4": true, "other": true} {
		_, err := os.Stat(filepath.Join(dir, d))
		if got := err == nil; got != want {
			t.Errorf("%s kept %v, want %v", d, got, want)
		}
	}
}
