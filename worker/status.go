package worker

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/worker/internal/status"
)

// setTask changes task t's status under the worker's lock.
func (w *worker) setTask(t int, f func(*status.Task)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.tasks[t]
	if s == nil {
		s = &status.Task{ID: t}
		w.tasks[t] = s
	}
	f(s)
}

// taskSnapshot returns a copy of every task's status, by task.
func (w *worker) taskSnapshot() []status.Task {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]status.Task, 0, len(w.tasks))
	for _, s := range w.tasks {
		c := *s
		c.Checkpoints = slices.Clone(s.Checkpoints)
		c.Positions = slices.Clone(s.Positions)
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b status.Task) int { return a.ID - b.ID })
	return out
}

// positions are the checkpointed positions of the tasks that run here.
func (w *worker) positions() []checkpoint.SourcePosition {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []checkpoint.SourcePosition
	for _, s := range w.tasks {
		if s.State == status.Running || s.State == status.Restoring {
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
		if s.State == status.Restoring {
			return false, "task " + itoa(s.ID) + " is restoring"
		}
	}
	return true, "ok"
}

// status is what the worker knows of itself now, for the status page and
// /status.json; with the group, it asks the coordinator for its members.
func (w *worker) status(ctx context.Context) status.Worker {
	c := &w.cfg
	s := status.Worker{Job: c.Job, Name: c.name(), Input: strings.Join(w.inputs, ","), Output: strings.Join(w.outputs, ","), Started: w.started, Now: time.Now(),
		Tasks: w.taskSnapshot(), Assignment: "static (--tasks)", Assigned: c.Tasks}
	s.RecordsIn, s.RecordsOut = w.stats.Records()
	s.Ready, s.ReadyWhy = w.ready()
	w.mu.Lock()
	if w.stop != nil {
		s.Stopped, s.StoppedReason, s.StoppedSince = w.stop.Error(), w.stopReason, w.stopSince
	}
	w.mu.Unlock()
	if len(c.Tasks) > 0 {
		return s
	}
	s.Group, s.Assignment, s.Assigned = c.Group(), "consumer group", nil
	g := w.membership() // nil until the worker joined
	if g == nil {
		return s
	}
	s.Assigned = g.assignedTasks()
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	gs, err := g.describe(dctx)
	cancel()
	if err != nil {
		s.GroupErr = err.Error()
	} else {
		s.GroupState = &gs
	}
	return s
}
