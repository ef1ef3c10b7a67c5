package integration

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/testcluster"
)

// TestZombie pauses worker A (SIGSTOP: a long GC pause, a partition) while
// worker B takes over its tasks with a newer epoch and makes progress; then
// A resumes (SIGCONT) as a zombie, runs a while, and is killed; B runs to the
// end of the input. A's writes after it resumed must never become visible
// (the output is exactly-once), and a manifest A wrote after it resumed must
// never be restored: a last restart of B restores a manifest of B's epoch.
func TestZombie(t *testing.T) {
	c := testcluster.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	const partitions = 2
	tasks := []int{0, 1}
	j := newCountJob(t, c, partitions)
	out := startOutputReader(t, c, j.output, partitions)
	gen := startGenerator(t, c, j.input, 100, -1, 1000)
	flags := []string{"--interval", "500ms", "--tolerable-failures", "3", "--txn-timeout", "60s", "--pool-size", "9"}
	epochA := time.Now().UnixNano()
	epochB := epochA + int64(time.Minute)
	withEpoch := func(e int64) []string { return append(slices.Clone(flags), "--epoch", strconv.FormatInt(e, 10)) }

	a := j.run("A", taskList(partitions), withEpoch(epochA)...)
	for _, task := range tasks {
		if _, _, err := a.WaitLine(ctx, 0, func(l string) bool {
			return isMsg(msgCheckpointComplete, task)(l) && logInt(l, "checkpoint") >= 3
		}); err != nil {
			t.Fatalf("A, task %d: %v", task, err)
		}
	}
	a.Signal(syscall.SIGSTOP)
	paused := map[int]checkpoint.ID{} // per task: A's newest manifest when paused
	for _, task := range tasks {
		ms := j.manifests(ctx, task)
		paused[task] = ms[len(ms)-1].Checkpoint
	}
	recs, _ := out.Progress()
	t.Logf("SIGSTOP A (pid %d); its newest checkpoints %v; output %d records", a.Pid(), paused, recs)

	b := j.run("B", taskList(partitions), withEpoch(epochB)...)
	for _, task := range tasks {
		if _, _, err := b.WaitLine(ctx, 0, func(l string) bool {
			return isMsg(msgCheckpointComplete, task)(l) && logInt(l, "checkpoint") >= int64(paused[task])+2
		}); err != nil {
			t.Fatalf("B, task %d: %v", task, err)
		}
	}
	if err := out.WaitFor(ctx, func(n, _ int) bool { return n >= recs+1000 }); err != nil {
		t.Fatalf("B made no progress: %v", err)
	}
	recs, _ = out.Progress()
	t.Logf("B took over and made progress: output %d records", recs)

	// The zombie wakes up: its producers were fenced by B, its
	// checkpoints race B's.
	aLines := len(a.Lines())
	a.Signal(syscall.SIGCONT)
	resumed := time.Now()
	poll(ctx, t, 3*time.Second) // A runs a while
	a.Kill9()
	after := a.Lines()[aLines:]
	t.Logf("A ran %v after SIGCONT and logged %d lines; first ones:\n%s",
		time.Since(resumed).Round(time.Millisecond), len(after), strings.Join(after[:min(len(after), 15)], "\n"))

	// A's manifests from after its pause: written by the zombie.
	zombie := map[int]map[checkpoint.ID]bool{}
	for _, task := range tasks {
		zombie[task] = map[checkpoint.ID]bool{}
		for _, m := range j.manifests(ctx, task) {
			if m.Epoch == epochA && m.Checkpoint > paused[task] {
				zombie[task][m.Checkpoint] = true
			}
		}
		t.Logf("task %d: A wrote %d manifests after it resumed: %v", task, len(zombie[task]), slices.Sorted(mapKeys(zombie[task])))
	}

	total := gen.Stop()
	wctx, wcancel := context.WithTimeout(ctx, 90*time.Second)
	err := out.WaitFor(wctx, func(_, distinct int) bool { return int64(distinct) >= total })
	wcancel()
	if err != nil {
		recs, distinct := out.Progress()
		t.Errorf("the output did not cover the input: %v; %d records, %d distinct of %d", err, recs, distinct, total)
	}
	if err, graceful := b.Terminate(time.Minute); err != nil || !graceful {
		t.Errorf("B on SIGTERM: %v (graceful %v)", err, graceful)
	}

	// Restart B once more: it must restore a manifest of its own epoch.
	b2 := j.run("B2", taskList(partitions), withEpoch(epochB)...)
	for _, task := range tasks {
		_, line, err := b2.WaitLine(ctx, 0, isMsg(msgRestoring, task))
		if err != nil {
			t.Errorf("B2, task %d restored nothing: %v", task, err)
			continue
		}
		id := checkpoint.ID(logInt(line, "checkpoint"))
		m := j.manifest(ctx, task, id)
		t.Logf("B2, task %d: restored checkpoint %d of epoch %d (A %d, B %d)", task, id, m.Epoch, epochA, epochB)
		if m.Epoch != epochB {
			t.Errorf("B2, task %d restored checkpoint %d of epoch %d, want B's epoch %d", task, id, m.Epoch, epochB)
		}
	}
	if err, graceful := b2.Terminate(time.Minute); err != nil || !graceful {
		t.Errorf("B2 on SIGTERM: %v (graceful %v)", err, graceful)
	}
	// No restore of B or B2 used a zombie manifest.
	for _, p := range []*proc{b, b2} {
		for _, l := range p.Lines() {
			if logMsg(l) != msgRestoring {
				continue
			}
			task, id := int(logInt(l, "task")), checkpoint.ID(logInt(l, "checkpoint"))
			if zombie[task][id] {
				t.Errorf("%s restored checkpoint %d of task %d, which zombie A wrote after it resumed: %s", p.name, id, task, l)
			}
		}
	}

	rep := j.finish(ctx, out, total)
	t.Logf("%v", rep)
	assertExactlyOnce(t, rep)
}
