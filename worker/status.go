package worker

import (
	"slices"
	"time"

	"github.com/weirstream/weir/checkpoint"
)

// Task states, as the status page and /readyz see them.
const (
	stateRestoring  = "restoring"
	stateRunning    = "running"
	stateStopping   = "stopping"
	stateStopped    = "stopped"
	stateSuperseded = "superseded"
	stateFailed     = "failed"
)

// recentCheckpoints is how many completed checkpoints of a task the status
// page keeps.
const recentCheckpoints = 30

// taskStatus is what the worker knows of one task it runs or ran.
type taskStatus struct {
	Task  int       `json:"task"`
	State string    `json:"state"`
	Epoch int64     `json:"epoch"`
	Since time.Time `json:"since"`
	// RestoredFrom is the checkpoint the task restored (0: fresh start).
	RestoredFrom checkpoint.ID `json:"restored_from"`
	// Restore and FirstRecord are measured from the assignment.
	Restore     time.Duration `json:"restore_ns"`
	FirstRecord time.Duration `json:"first_record_ns"`
	Err         string        `json:"error,omitempty"`
	// Checkpoints are the newest completed checkpoints, oldest first.
	Checkpoints []checkpointRow             `json:"checkpoints"`
	Positions   []checkpoint.SourcePosition `json:"positions,omitempty"`

	assigned time.Time
}

// checkpointRow is one completed checkpoint on the status page.
type checkpointRow struct {
	ID          checkpoint.ID `json:"id"`
	Time        time.Time     `json:"time"`
	Duration    time.Duration `json:"duration_ns"`
	Size        int64         `json:"size"`
	Incremental int64         `json:"incremental"`
}

// setTask changes task t's status under the worker's lock.
func (w *worker) setTask(t int, f func(*taskStatus)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.tasks[t]
	if s == nil {
		s = &taskStatus{Task: t}
		w.tasks[t] = s
	}
	f(s)
}

// taskSnapshot returns a copy of every task's status, by task.
func (w *worker) taskSnapshot() []taskStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]taskStatus, 0, len(w.tasks))
	for _, s := range w.tasks {
		c := *s
		c.Checkpoints = slices.Clone(s.Checkpoints)
		c.Positions = slices.Clone(s.Positions)
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b taskStatus) int { return a.Task - b.Task })
	return out
}

// positions are the checkpointed positions of the tasks that run here.
func (w *worker) positions() []checkpoint.SourcePosition {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []checkpoint.SourcePosition
	for _, s := range w.tasks {
		if s.State == stateRunning || s.State == stateRestoring {
			out = append(out, s.Positions...)
		}
	}
	return out
}

// ready reports whether every task assigned to this worker has restored
// (and, with the group, whether the group assigned tasks yet).
func (w *worker) ready() (bool, string) {
	if err := w.stopErr(); err != nil {
		return false, "job stopped on this worker: " + err.Error()
	}
	if g := w.membership(); g != nil && !g.joined() {
		return false, "not yet assigned by the group"
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.tasks {
		if s.State == stateRestoring {
			return false, "task " + itoa(s.Task) + " is restoring"
		}
	}
	return true, "ok"
}
