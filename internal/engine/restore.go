package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/weirstream/weir/checkpoint"
)

// ErrSuperseded stops a task for good: a checkpoint of the task carries a
// newer fencing epoch than this owner's, or another owner wrote a checkpoint
// id this one was about to write. Another worker owns the task now and this
// one is a zombie; restarting it would fence the new owner's transactions
// and take the task back.
var ErrSuperseded = checkpoint.ErrSuperseded

// ErrIncompatibleCheckpoint is why a task fails whose checkpoint does not
// fit the job: it has positions or state of operators the job no longer has
// (renamed or removed). Restarting cannot help, so the task is not
// restarted; deploy the job that wrote the checkpoint, or start the new one
// afresh under another --name.
var ErrIncompatibleCheckpoint = errors.New("checkpoint does not fit the job")

// ErrNoValidCheckpoint fails a task whose every checkpoint lost output: it
// cannot restore without skipping that output, and it never does so silently.
var ErrNoValidCheckpoint = errors.New("no valid checkpoint")

// unusableStateError: the state of the checkpoint a task restored from
// cannot be read back (a file is missing or fails its checksum). The
// supervisor restarts the task at once, walking back past that checkpoint.
type unusableStateError struct {
	checkpoint checkpoint.ID
	err        error // names the operator and the file
}

func (e *unusableStateError) Error() string { return e.err.Error() }
func (e *unusableStateError) Unwrap() error { return e.err }

// restore claims the task for this owner, picks the checkpoint the task
// restores from (walkBack says which, and why) and returns the highest
// checkpoint id seen, so that new ids continue after it. A claim or a
// manifest with a newer epoch than this owner's means a newer owner has
// the task: ErrSuperseded, and the task is not restarted. A manifest
// deleted since the listing (retention) is skipped; any other error
// reading one fails the restore (the supervisor retries): the checkpoints
// before it cannot be judged without knowing whether its transactions
// committed.
func (t *task) restore(ctx context.Context) (checkpoint.ID, error) {
	if err := checkpoint.Claim(ctx, t.storage, t.job, t.id, t.epoch); err != nil {
		return 0, err
	}
	if err := t.stillOwner(ctx); err != nil {
		return 0, err
	}
	listing, err := checkpoint.ListTask(ctx, t.storage, t.job, t.id)
	if err != nil {
		return 0, fmt.Errorf("list checkpoints: %w", err)
	}
	// Before anything is asked of the sinks: what a hold keeps may be what
	// their answers would hide.
	if err := t.held(ctx, listing.Holds); err != nil {
		return 0, err
	}
	var ms []checkpoint.Manifest
	for _, id := range listing.Completed {
		m, err := checkpoint.ReadManifest(ctx, t.storage, t.job, t.id, id)
		if errors.Is(err, checkpoint.ErrNotFound) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("read manifest of checkpoint %d: %w", id, err)
		}
		ms = append(ms, m)
	}
	for _, m := range ms {
		if m.Epoch > t.epoch {
			return 0, fmt.Errorf("%w: checkpoint %d of task %d has epoch %d, this worker's is %d", ErrSuperseded, m.Checkpoint, t.id, m.Epoch, t.epoch)
		}
	}
	// Only now is this owner's claim the newest: older ones may go.
	if err := checkpoint.DropClaimsBelow(ctx, t.storage, t.job, t.id, t.epoch); err != nil {
		t.log.Warn("could not delete older owners' claims", "err", err)
	}
	recorded, err := checkpoint.ReadRecorded(ctx, t.storage, t.job, t.id, ms, listing.CommitRecords)
	if err != nil {
		return 0, err
	}
	w := newWalkBack(t.id, ms, recorded, t.unusable)
	for {
		step := w.next()
		switch {
		case step.check != nil:
			outcomes, err := t.sinkCommitters().check(ctx, step.check)
			if err != nil {
				return 0, fmt.Errorf("check the transactions of the checkpoints: %w", err)
			}
			w.checkedAs(step.check, outcomes)
			continue
		case step.abort != nil:
			// An older owner still alive could commit these after the
			// check said resumable (its check of the claims passed before
			// this owner claimed): aborted, they cannot, and one it
			// committed first shows as committed.
			outcomes, err := t.sinkCommitters().abort(ctx, t.log, step.abort)
			if err != nil {
				return 0, fmt.Errorf("abort the open transactions of the checkpoints walked back past: %w", err)
			}
			for i, c := range step.abort {
				t.log.Info("aborted a transaction of a checkpoint walked back past", "transactional_id", c.TransactionalID, "outcome", outcomes[i])
			}
			w.abortedAs(step.abort, outcomes)
			continue
		}
		for _, n := range step.notes {
			if n.err {
				t.log.Error(n.msg, "checkpoint", n.checkpoint, "detail", n.detail)
			} else {
				t.log.Warn(n.msg, "checkpoint", n.checkpoint, "detail", n.detail)
			}
		}
		switch {
		case step.err != nil:
			return 0, step.err
		case step.restore != nil:
			t.use(*step.restore, recorded)
		}
		if n := len(listing.Completed); n > 0 {
			t.listedCompleted = listing.Completed[n-1]
		}
		return listing.Highest, nil
	}
}

// stillOwner fails with ErrSuperseded if a newer owner claimed the task.
// The task asks before it restores and again right before its sinks open:
// opening them fences every other owner's transactions, and a restore may
// have taken minutes, long enough for the task to move.
func (t *task) stillOwner(ctx context.Context) error {
	claims, err := checkpoint.Claims(ctx, t.storage, t.job, t.id)
	if err != nil {
		return err
	}
	if n := len(claims); n > 0 && claims[n-1] > t.epoch {
		return fmt.Errorf("%w: task %d was claimed by the owner with epoch %d, this one's is %d", ErrSuperseded, t.id, claims[n-1], t.epoch)
	}
	return nil
}

// committerSet answers for the committables of every sink of the job: each
// to its own sink's Committer (sinks of different kinds judge their own),
// resumable for a sink without one (or one the job no longer has, which
// checkRestoredOperators refuses).
type committerSet map[string]Committer

func (t *task) sinkCommitters() committerSet { return t.plan.g.committers }

func (s committerSet) check(ctx context.Context, cs []checkpoint.Committable) ([]CommitOutcome, error) {
	return s.each(ctx, cs, Committer.CheckCommittables)
}

func (s committerSet) abort(ctx context.Context, log *slog.Logger, cs []checkpoint.Committable) ([]CommitOutcome, error) {
	return s.each(ctx, cs, func(c Committer, ctx context.Context, cs []checkpoint.Committable) ([]CommitOutcome, error) {
		return c.AbortCommittables(ctx, log, cs)
	})
}

func (s committerSet) each(ctx context.Context, cs []checkpoint.Committable,
	ask func(Committer, context.Context, []checkpoint.Committable) ([]CommitOutcome, error)) ([]CommitOutcome, error) {
	out := make([]CommitOutcome, len(cs)) // CommitResumable
	byOp := map[string][]int{}
	var ops []string
	for i, c := range cs {
		if _, ok := byOp[c.Operator]; !ok {
			ops = append(ops, c.Operator)
		}
		byOp[c.Operator] = append(byOp[c.Operator], i)
	}
	for _, op := range ops {
		c := s[op]
		if c == nil {
			continue
		}
		idx := byOp[op]
		batch := make([]checkpoint.Committable, len(idx))
		for j, i := range idx {
			batch[j] = cs[i]
		}
		answers, err := ask(c, ctx, batch)
		if err != nil {
			return nil, fmt.Errorf("sink %s: %w", op, err)
		}
		if len(answers) != len(batch) {
			return nil, fmt.Errorf("sink %s: %d outcomes for %d committables", op, len(answers), len(batch))
		}
		for j, i := range idx {
			out[i] = answers[j]
		}
	}
	return out, nil
}

// use makes m the checkpoint the task's operators restore from. Its
// transactions that storage knows became of are left out of what the
// sinks resume: they need nothing, and the broker may have forgotten
// them.
func (t *task) use(m checkpoint.Manifest, recorded checkpoint.Recorded) {
	t.restored = map[string]*checkpoint.Ack{}
	for i := range m.Operators {
		a := m.Operators[i]
		a.Committables = slices.DeleteFunc(slices.Clone(a.Committables), recorded.Knows)
		t.restored[a.Operator] = &a
	}
	t.restoredFrom = m.Checkpoint
	t.log.Info("restoring", "checkpoint", m.Checkpoint, "its_epoch", m.Epoch)
}
