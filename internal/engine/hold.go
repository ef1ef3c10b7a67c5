package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/weirstream/weir/checkpoint"
)

// Holding is a failure whose evidence may not outlast it (see
// checkpoint.Hold): an error of a sink that opens, restores or closes. When
// a task's run fails with one, or a closer returns one, the task writes a
// hold named HoldName into checkpoint storage with the error's text, and
// does not start again, on this worker or another, until an operator
// releases it. The same failure seen again gives the same name.
type Holding interface {
	error
	HoldName() string
}

// HeldError fails a task that has holds: it restarts with the usual
// backoff, and each restart reads them again, so that a release lets it
// go on.
type HeldError struct {
	Job   string
	Task  int
	Holds []checkpoint.Hold
}

func (e *HeldError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "task %d is held until an operator releases it", e.Task)
	for _, h := range e.Holds {
		fmt.Fprintf(&b, "; hold %s, since %s: %s; once done what it says: %s",
			h.Name, h.Time.UTC().Format(time.RFC3339), h.Reason, releaseHint(e.Job, e.Task, h.Name))
	}
	return b.String()
}

// releaseHint is the command that releases a hold.
func releaseHint(job string, task int, name string) string {
	return fmt.Sprintf("`processor checkpoints release --name %s --task %d --hold %s` (with the workers' --checkpoints)", job, task, name)
}

// held fails with a *HeldError if the listing names holds.
func (t *task) held(ctx context.Context, names []string) error {
	if len(names) == 0 {
		return nil
	}
	holds, err := checkpoint.ReadHolds(ctx, t.storage, t.job, t.id, names)
	if err != nil {
		return fmt.Errorf("read the task's holds: %w", err)
	}
	if len(holds) == 0 {
		return nil // released since the listing
	}
	return &HeldError{Job: t.job, Task: t.id, Holds: holds}
}

// holdFor writes the hold err asks for, if it is Holding, and returns err
// saying so. It does not fail: a hold that cannot be written is logged,
// with the failure it was to keep, and err is returned as it was.
func (t *task) holdFor(err error) error {
	var h Holding
	if !errors.As(err, &h) {
		return err
	}
	name := h.HoldName()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if perr := checkpoint.PutHold(ctx, t.storage, t.job, t.id, checkpoint.Hold{Name: name, Reason: err.Error()}); perr != nil {
		t.log.Error("could not write the task's hold; if what the failure names ends before the next start sees it (a transaction timeout), nothing will say so again",
			"hold", name, "err", perr, "failure", err)
		return err
	}
	t.log.Error("task held: it does not start again until an operator releases it", "hold", name, "release", releaseHint(t.job, t.id, name), "failure", err)
	return fmt.Errorf("%w; the task is held until an operator releases it: %s", err, releaseHint(t.job, t.id, name))
}
