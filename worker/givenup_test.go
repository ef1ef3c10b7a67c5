package worker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/examples/count"
)

// TestGivenUpTaskRunsWhenAssignedBack: a task that stops on this worker
// because a newer owner claimed it is given back to the group; when the
// group assigns it here again, it must run again. franz-go does not report
// it as added (to it, the worker owned the partition all along), and a
// worker that only started added tasks left it assigned and stopped for
// good, its partition unread, nothing failing (found by processor chaos:
// one partition's output missing after a paused worker came back).
func TestGivenUpTaskRunsWhenAssignedBack(t *testing.T) {
	j := newFaultJob(t)
	cfg := j.config(t)
	cfg.Tasks = nil // the group assigns the task
	cfg.SessionTimeout, cfg.HeartbeatInterval = 6*time.Second, time.Second
	j.start(t, cfg, []Job{NewJob("count", count.Build)}, Options{})
	j.produce(t, 50)
	j.waitCovered(t, 30*time.Second)

	// A newer owner claims the task: this worker's task stops at its next
	// checkpoint and is given up. The group, with no other member, gives
	// it back here with an epoch above the claim's.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st, err := checkpoint.Open(ctx, cfg.Checkpoints)
	if err != nil {
		t.Fatal(err)
	}
	epoch, err := checkpoint.NextEpoch(ctx, st, cfg.Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.Claim(ctx, st, cfg.Name, 0, epoch); err != nil {
		t.Fatal(err)
	}
	j.obs.waitFor(t, 30*time.Second, "the task to stop, superseded", func() bool {
		for _, err := range j.obs.failed {
			if strings.Contains(err.Error(), "newer owner") {
				return true
			}
		}
		return false
	})
	j.produce(t, 50)
	j.waitCovered(t, 30*time.Second)
	j.finish(t)
}
