package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Holds. Some failures leave evidence that does not last: an open
// transaction that its coordinator aborts at its timeout, taking records
// of a completed checkpoint with it, leaves nothing a later start can
// find. A hold keeps the failure in storage, beside the task's claims, and
// a task with a hold does not start (its restore lists them with its
// checkpoints, at no extra request) until an operator, having done what the
// hold's reason says, releases it (ReleaseHold).

const holdPrefix = "hold-"

// maxHoldSize bounds what readHold reads: a reason is a paragraph.
const maxHoldSize = 1 << 20

// Hold is what stops a task until an operator releases it.
type Hold struct {
	Name   string    `json:"name"` // unique within the task: letters, digits, '-', '_', '.'
	Time   time.Time `json:"time"` // when it was first written
	Reason string    `json:"reason"`
}

// holdObject is the object name of a task's hold.
func holdObject(job string, task int, name string) string {
	return tasksDir(job, task) + holdPrefix + name
}

// ValidHoldName reports whether name can name a hold.
func ValidHoldName(name string) bool {
	if name == "" || len(name) > 200 {
		return false
	}
	for _, c := range name {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// PutHold writes h for the task. A hold of that name written before is
// kept, with its time and reason: the first report of a failure is the one
// that saw it whole.
func PutHold(ctx context.Context, st Storage, job string, task int, h Hold) error {
	if !ValidHoldName(h.Name) {
		return fmt.Errorf("hold task %d of %s: invalid name %q", task, job, h.Name)
	}
	if h.Time.IsZero() {
		h.Time = time.Now()
	}
	h.Time = h.Time.UTC()
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	err = st.PutIfAbsent(ctx, holdObject(job, task, h.Name), append(b, '\n'))
	if err != nil && !errors.Is(err, ErrExists) {
		return fmt.Errorf("hold task %d of %s: %w", task, job, err)
	}
	return nil
}

// holdName returns the hold name of an object of the task's folder, ok
// false for any other object.
func holdName(job string, task int, object string) (string, bool) {
	name, ok := strings.CutPrefix(object, tasksDir(job, task)+holdPrefix)
	return name, ok && ValidHoldName(name)
}

// ReadHolds reads the task's holds named by a listing (TaskListing.Holds).
// A hold released since the listing is left out.
func ReadHolds(ctx context.Context, st Storage, job string, task int, names []string) ([]Hold, error) {
	var out []Hold
	for _, name := range names {
		h, err := readHold(ctx, st, job, task, name)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, nil
}

func readHold(ctx context.Context, st Storage, job string, task int, name string) (Hold, error) {
	object := holdObject(job, task, name)
	rc, err := st.Get(ctx, object)
	if err != nil {
		return Hold{}, fmt.Errorf("read hold %s: %w", object, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxHoldSize))
	if err != nil {
		return Hold{}, fmt.Errorf("read hold %s: %w", object, err)
	}
	var h Hold
	if err := json.Unmarshal(b, &h); err != nil {
		// Still a hold: what stops the task is the object, not its body.
		return Hold{Name: name, Reason: fmt.Sprintf("(unreadable: %v)", err)}, nil
	}
	h.Name = name
	return h, nil
}

// Holds lists and reads the task's holds.
func Holds(ctx context.Context, st Storage, job string, task int) ([]Hold, error) {
	l, err := ListTask(ctx, st, job, task)
	if err != nil {
		return nil, err
	}
	return ReadHolds(ctx, st, job, task, l.Holds)
}

// ReleaseHold deletes a hold of the task; ErrNotFound if it has none of
// that name.
func ReleaseHold(ctx context.Context, st Storage, job string, task int, name string) error {
	if !ValidHoldName(name) {
		return fmt.Errorf("release hold of task %d of %s: invalid name %q", task, job, name)
	}
	if _, err := readHold(ctx, st, job, task, name); err != nil {
		return fmt.Errorf("release hold of task %d of %s: %w", task, job, err)
	}
	if err := st.Delete(ctx, holdObject(job, task, name)); err != nil {
		return fmt.Errorf("release hold %s of task %d of %s: %w", name, task, job, err)
	}
	return nil
}
