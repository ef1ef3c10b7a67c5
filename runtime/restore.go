package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

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

func committables(m checkpoint.Manifest) []checkpoint.Committable {
	var cs []checkpoint.Committable
	for _, a := range m.Operators {
		cs = append(cs, a.Committables...)
	}
	return cs
}

// restore claims the task for this owner, picks the checkpoint the task
// restores from and returns the highest checkpoint id seen, so that new ids
// continue after it. The rules, newest manifest first:
//   - a claim or a manifest with a newer epoch than this owner's means a
//     newer owner has the task: ErrSuperseded, and the task is not
//     restarted;
//   - a manifest deleted since the listing (retention) is skipped; any other
//     error reading one fails the restore (the supervisor retries): the
//     checkpoints before it cannot be judged without knowing whether its
//     transactions committed;
//   - a manifest that an older owner wrote after a newer owner's (a
//     zombie's: its epoch is below that of a manifest with a lower id) is
//     never restored, whatever its transactions say: the newer owner's
//     history goes on from an earlier cut, and its committed output is not
//     in the zombie's state. (One with no transactions at all would pass the
//     next rule, and replay that output.) Nothing the zombie committed is
//     lost by skipping it: an owner commits a checkpoint only after it
//     found no newer claim once its manifest was durable (Driver), and the
//     newer owner claimed before it listed, so every checkpoint a zombie
//     committed is one the newer owner saw here;
//   - what became of each transaction is decided from checkpoint storage's
//     record of commits first (checkpoint.Ack.Committed of any manifest, a
//     CommitRecord): one recorded there is committed, whatever the external
//     system remembers now. Only the others are asked about
//     (CheckCommittables);
//   - a manifest with a lost committable is not valid: walk back. Walking
//     back past it re-derives its output, which is only right if none of its
//     transactions was committed; if one was, the task fails loudly;
//   - a manifest whose state could not be restored (t.unusable: a file is
//     missing or corrupt) is walked back past like one with lost output,
//     under the same rule: its committed transactions forbid it. Those of
//     its transactions not yet committed are aborted when the sink
//     re-initialises its transactional ids;
//   - a transaction whose fate cannot be told (CommitUnknown: the external
//     system forgot it, and storage has no record of its commit) forbids
//     both restoring its checkpoint and walking back past it: the task
//     fails loudly;
//   - if no manifest is valid, the task fails loudly with what was lost.
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
	highest := listing.Highest
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
	if len(ms) == 0 {
		return highest, nil
	}
	recorded, err := checkpoint.ReadRecorded(ctx, t.storage, t.job, t.id, ms, listing.CommitRecords)
	if err != nil {
		return 0, err
	}
	zombie := zombieManifests(ms)

	rejected := map[checkpoint.TxnKey]CommitOutcome{}
	var lost []string
	for i := len(ms) - 1; i >= 0; i-- {
		m := ms[i]
		if zombie[i] {
			t.log.Warn("checkpoint written by an older owner after a newer owner's checkpoint (a zombie's): never restored",
				"checkpoint", m.Checkpoint, "its_epoch", m.Epoch)
			continue
		}
		cs := committables(m)
		outcomes, err := t.checkCommittables(ctx, cs, recorded)
		if err != nil {
			return 0, fmt.Errorf("check committables of checkpoint %d: %w", m.Checkpoint, err)
		}
		if bad := t.unusable[m.Checkpoint]; bad != nil {
			t.log.Error("checkpoint state is unusable, walking back", "checkpoint", m.Checkpoint, "err", bad)
			lost = append(lost, fmt.Sprintf("checkpoint %d: %v", m.Checkpoint, bad))
			for j, c := range cs {
				rejected[c.Key()] = outcomes[j]
			}
			continue
		}
		var gone, unknown []string
		for j, o := range outcomes {
			switch o {
			case CommitLost:
				gone = append(gone, describeTxn(cs[j]))
			case CommitUnknown:
				unknown = append(unknown, describeTxn(cs[j]))
			}
		}
		if len(unknown) > 0 {
			return 0, fmt.Errorf("%w for task %d: checkpoint %d names transactions %s, of which neither the broker nor checkpoint storage "+
				"keeps a record: %s. Whether that output is in the output topic cannot be told; restoring checkpoint %d "+
				"would lose it if it was aborted, an earlier checkpoint would write it twice if it was committed "+
				"(docs/operating.md, \"Transactions nobody remembers\", says what to do)",
				ErrNoValidCheckpoint, t.id, m.Checkpoint, strings.Join(unknown, ", "), forgotten, m.Checkpoint)
		}
		if len(gone) == 0 {
			if err := t.closeRejected(ctx, cs, rejected); err != nil {
				return 0, err
			}
			if err := checkWalkBack(m, cs, rejected, lost); err != nil {
				return 0, err
			}
			if len(rejected) > 0 {
				t.log.Warn("restoring an earlier checkpoint; the output of the later ones is derived again", "checkpoint", m.Checkpoint)
			}
			t.use(m, recorded)
			return highest, nil
		}
		t.log.Error("checkpoint is not valid: its transactions were aborted, walking back", "checkpoint", m.Checkpoint, "lost", strings.Join(gone, ", "))
		lost = append(lost, fmt.Sprintf("checkpoint %d lost %s", m.Checkpoint, strings.Join(gone, ", ")))
		for j, c := range cs {
			rejected[c.Key()] = outcomes[j]
		}
	}
	return 0, fmt.Errorf("%w for task %d: %s", ErrNoValidCheckpoint, t.id, strings.Join(lost, "; "))
}

// forgotten says why a transaction can be unknown to everyone.
const forgotten = "the broker expired its transactional id (transactional.id.expiration.ms, 7 days by default) " +
	"or re-initialised it, and no later checkpoint recorded its commit"

func describeTxn(c checkpoint.Committable) string {
	return fmt.Sprintf("%s (producer %d, epoch %d)", c.TransactionalID, c.ProducerID, c.Epoch)
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

// zombieManifests marks the manifests (ascending by id) that an older owner
// wrote after a newer owner's: those whose epoch is below the epoch of a
// manifest with a lower id. Epochs grow with every change of owner, so the
// live owner's history is the chain of manifests whose epochs never fall.
func zombieManifests(ms []checkpoint.Manifest) []bool {
	zombie := make([]bool, len(ms))
	var newest int64
	for i, m := range ms {
		if i > 0 && m.Epoch < newest {
			zombie[i] = true
			continue
		}
		newest = m.Epoch
	}
	return zombie
}

// closeRejected aborts the transactions of the later checkpoints that
// restore walks back past and that are still open (not covered by the
// checkpoint it restores, cs), and records what became of them. An older
// owner still alive could otherwise commit them after the check said
// "resumable" (its check of the claims passed before this owner claimed),
// and walking back would write their output again; aborted, they cannot
// commit, and one its owner committed first shows as committed, which
// checkWalkBack refuses loudly.
func (t *task) closeRejected(ctx context.Context, cs []checkpoint.Committable, rejected map[checkpoint.TxnKey]CommitOutcome) error {
	if t.cfg.AbortCommittables == nil {
		return nil
	}
	covered := map[checkpoint.TxnKey]bool{}
	for _, c := range cs {
		covered[c.Key()] = true
	}
	var open []checkpoint.Committable
	for k, o := range rejected {
		if o == CommitResumable && !covered[k] {
			open = append(open, checkpoint.Committable{Operator: k.Operator, TransactionalID: k.ID, ProducerID: k.Producer, Epoch: k.Epoch, Data: json.RawMessage(k.Data)})
		}
	}
	if len(open) == 0 {
		return nil
	}
	outcomes, err := t.cfg.AbortCommittables(ctx, open)
	if err != nil {
		return fmt.Errorf("abort the open transactions of the checkpoints walked back past: %w", err)
	}
	if len(outcomes) != len(open) {
		return fmt.Errorf("%d outcomes for %d aborted committables", len(outcomes), len(open))
	}
	for i, c := range open {
		rejected[c.Key()] = outcomes[i]
		t.log.Info("aborted a transaction of a checkpoint walked back past", "transactional_id", c.TransactionalID, "outcome", outcomes[i])
	}
	return nil
}

// checkWalkBack refuses to restore m when a newer, rejected checkpoint had
// a transaction committed that m does not cover: replaying from m would
// write that output a second time. why says what made the newer ones unusable.
func checkWalkBack(m checkpoint.Manifest, cs []checkpoint.Committable, rejected map[checkpoint.TxnKey]CommitOutcome, why []string) error {
	covered := map[checkpoint.TxnKey]bool{}
	for _, c := range cs {
		covered[c.Key()] = true
	}
	for k, o := range rejected {
		if covered[k] {
			continue
		}
		switch o {
		case CommitDone:
			return fmt.Errorf("%w: restoring checkpoint %d would write the output of transaction %s again: it was committed, but the later checkpoint that covers it cannot be used (%s)",
				ErrNoValidCheckpoint, m.Checkpoint, k.ID, strings.Join(why, "; "))
		case CommitUnknown:
			return fmt.Errorf("%w: restoring checkpoint %d would write the output of transaction %s again if it was committed, which cannot be told: %s; "+
				"the later checkpoint that covers it cannot be used (%s) (docs/operating.md, \"Transactions nobody remembers\", says what to do)",
				ErrNoValidCheckpoint, m.Checkpoint, k.ID, forgotten, strings.Join(why, "; "))
		}
	}
	return nil
}

// checkCommittables decides what became of each of cs: what checkpoint
// storage recorded, else what CheckCommittables says (resumable when it is
// not set).
func (t *task) checkCommittables(ctx context.Context, cs []checkpoint.Committable, recorded checkpoint.Recorded) ([]CommitOutcome, error) {
	out := make([]CommitOutcome, len(cs))
	var ask []checkpoint.Committable
	var at []int
	for i, c := range cs {
		switch {
		case recorded.Committed[c.Key()]:
			out[i] = CommitDone
			continue
		case recorded.Aborted[c.Key()]:
			out[i] = CommitLost
			continue
		}
		ask = append(ask, c)
		at = append(at, i)
	}
	if len(ask) == 0 || t.cfg.CheckCommittables == nil {
		return out, nil
	}
	answers, err := t.cfg.CheckCommittables(ctx, ask)
	if err != nil {
		return nil, err
	}
	if len(answers) != len(ask) {
		return nil, fmt.Errorf("%d outcomes for %d committables", len(answers), len(ask))
	}
	for j, o := range answers {
		out[at[j]] = o
	}
	return out, nil
}

// use makes m the checkpoint the task's operators restore from. Its
// transactions that storage recorded as committed are left out of what
// the sinks resume: they need nothing, and the broker may have forgotten
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
