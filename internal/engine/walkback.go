package engine

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/weirstream/weir/checkpoint"
)

// walkBack decides which checkpoint a task restores from: a pure core, fed
// by task.restore with what storage holds and what the sinks' Committers
// answer. Each call of next returns the one thing it needs before it can
// decide (the outcome of committables, or to abort some), or its decision.
// It decides afresh from everything it was told at each call, so the
// order of its questions is the only state it keeps.
//
// The rules, newest manifest first:
//   - a manifest that an older owner wrote after a newer owner's (a
//     zombie's: its epoch is below that of a manifest with a lower id) is
//     never restored, whatever its transactions say: the newer owner's
//     history goes on from an earlier cut, and its committed output is not
//     in the zombie's state. Nothing the zombie committed is lost by
//     skipping it: an owner commits a checkpoint only after it found no
//     newer claim once its manifest was durable (checkpoint.Driver), and
//     the newer owner claimed before it listed, so every checkpoint a
//     zombie committed is one the newer owner saw;
//   - what became of each transaction is what checkpoint storage recorded
//     (checkpoint.Recorded: a later manifest's record of its commit, a
//     commit record), else what its sink's Committer says;
//   - a manifest with a lost transaction is not valid: walk back. Walking
//     back past it re-derives its output, which is only right if none of
//     its transactions was committed: one that was fails the restore;
//   - a manifest whose state could not be restored (unusable: a file is
//     missing or corrupt) is walked back past under the same rule;
//   - before a checkpoint is restored, the transactions of the later ones
//     that are still open are aborted, so that their owner, still alive,
//     cannot commit them after the decision; one it committed first fails
//     the restore as above;
//   - a transaction nobody remembers (CommitUnknown) forbids both restoring
//     its checkpoint and walking back past it: the restore fails;
//   - no manifest at all: the task starts afresh; manifests but none
//     valid: the restore fails, naming what was lost.
type walkBack struct {
	task     int
	ms       []checkpoint.Manifest // ascending by id
	recorded checkpoint.Recorded
	unusable map[checkpoint.ID]error
	// checked and aborted are the answers so far: of CheckCommittables,
	// and of AbortCommittables (which overrule the former).
	checked, aborted map[checkpoint.TxnKey]CommitOutcome
}

func newWalkBack(task int, ms []checkpoint.Manifest, recorded checkpoint.Recorded, unusable map[checkpoint.ID]error) *walkBack {
	return &walkBack{task: task, ms: ms, recorded: recorded, unusable: unusable,
		checked: map[checkpoint.TxnKey]CommitOutcome{}, aborted: map[checkpoint.TxnKey]CommitOutcome{}}
}

// walkStep is what next needs or decided: exactly one of check, abort,
// restore, fresh and err is set.
type walkStep struct {
	check   []checkpoint.Committable // answer with checkedAs
	abort   []checkpoint.Committable // abort, answer with abortedAs
	restore *checkpoint.Manifest     // restore it: its committables storage knows are left out
	fresh   bool                     // no checkpoint: start afresh
	err     error                    // wraps ErrNoValidCheckpoint
	// notes are what the decision passed on the way, to be logged; set
	// with a decision only.
	notes []walkNote
}

// walkNote is one thing worth a log line.
type walkNote struct {
	err        bool // an error, else a warning
	msg        string
	checkpoint checkpoint.ID
	detail     string
}

func (w *walkBack) checkedAs(cs []checkpoint.Committable, outcomes []CommitOutcome) {
	for i, c := range cs {
		w.checked[c.Key()] = outcomes[i]
	}
}

func (w *walkBack) abortedAs(cs []checkpoint.Committable, outcomes []CommitOutcome) {
	for i, c := range cs {
		w.aborted[c.Key()] = outcomes[i]
	}
}

// outcome is what became of c, as far as the walk was told; ok false if
// it must ask.
func (w *walkBack) outcome(c checkpoint.Committable) (CommitOutcome, bool) {
	k := c.Key()
	switch {
	case w.recorded.Committed[k]:
		return CommitDone, true
	case w.recorded.Aborted[k]:
		return CommitLost, true
	}
	if o, ok := w.aborted[k]; ok {
		return o, true
	}
	o, ok := w.checked[k]
	return o, ok
}

// abortedByUs: c was open when checked and lost once this walk aborted
// it (an older checkpoint than its own was to be restored).
func (w *walkBack) abortedByUs(c checkpoint.Committable) bool {
	k := c.Key()
	checked, ok := w.checked[k]
	return ok && checked == CommitResumable && w.aborted[k] == CommitLost
}

func (w *walkBack) next() walkStep {
	if len(w.ms) == 0 {
		return walkStep{fresh: true}
	}
	var notes []walkNote
	zombie := zombieManifests(w.ms)
	rejected := map[checkpoint.TxnKey]CommitOutcome{}
	// seen are the committables of the manifests walked, whole: an abort
	// is asked with what the manifest says (the record it names too).
	seen := map[checkpoint.TxnKey]checkpoint.Committable{}
	var lost []string
	for i := len(w.ms) - 1; i >= 0; i-- {
		m := &w.ms[i]
		if zombie[i] {
			notes = append(notes, walkNote{msg: "checkpoint written by an older owner after a newer owner's checkpoint (a zombie's): never restored",
				checkpoint: m.Checkpoint, detail: fmt.Sprintf("its epoch %d", m.Epoch)})
			continue
		}
		cs := committables(*m)
		for _, c := range cs {
			seen[c.Key()] = c
		}
		var ask []checkpoint.Committable
		outcomes := make([]CommitOutcome, len(cs))
		for j, c := range cs {
			o, ok := w.outcome(c)
			if !ok {
				ask = append(ask, c)
			}
			outcomes[j] = o
		}
		if len(ask) > 0 {
			return walkStep{check: ask}
		}
		if bad := w.unusable[m.Checkpoint]; bad != nil {
			notes = append(notes, walkNote{err: true, msg: "checkpoint state is unusable, walking back", checkpoint: m.Checkpoint, detail: bad.Error()})
			lost = append(lost, fmt.Sprintf("checkpoint %d: %v", m.Checkpoint, bad))
			for j, c := range cs {
				rejected[c.Key()] = outcomes[j]
			}
			continue
		}
		// gone are its lost transactions; named, those lost before this
		// walk aborted any (the reason it is walked back past), unless
		// there are only the others.
		var gone, named, unknown []string
		for j, o := range outcomes {
			switch o {
			case CommitLost:
				gone = append(gone, describeTxn(cs[j]))
				if !w.abortedByUs(cs[j]) {
					named = append(named, describeTxn(cs[j]))
				}
			case CommitUnknown:
				unknown = append(unknown, describeTxn(cs[j]))
			}
		}
		if len(unknown) > 0 {
			return walkStep{notes: notes, err: fmt.Errorf("%w for task %d: checkpoint %d names transactions %s, of which neither the broker nor checkpoint storage "+
				"keeps a record: %s. Whether that output is in the output topic cannot be told; restoring checkpoint %d "+
				"would lose it if it was aborted, an earlier checkpoint would write it twice if it was committed "+
				"(docs/operating.md, \"Transactions nobody remembers\", says what to do)",
				ErrNoValidCheckpoint, w.task, m.Checkpoint, strings.Join(unknown, ", "), forgotten, m.Checkpoint)}
		}
		if len(gone) > 0 {
			if len(named) == 0 {
				named = gone
			}
			notes = append(notes, walkNote{err: true, msg: "checkpoint is not valid: its transactions were aborted, walking back",
				checkpoint: m.Checkpoint, detail: strings.Join(named, ", ")})
			lost = append(lost, fmt.Sprintf("checkpoint %d lost %s", m.Checkpoint, strings.Join(named, ", ")))
			for j, c := range cs {
				rejected[c.Key()] = outcomes[j]
			}
			continue
		}
		covered := map[checkpoint.TxnKey]bool{}
		for _, c := range cs {
			covered[c.Key()] = true
		}
		// The later checkpoints' open transactions: aborted first, so
		// that no one commits them after this decision.
		var open []checkpoint.Committable
		for _, k := range sortedKeys(rejected) {
			if rejected[k] != CommitResumable || covered[k] {
				continue
			}
			if _, done := w.aborted[k]; done {
				return walkStep{notes: notes, err: fmt.Errorf("abort transaction %s (producer %d, epoch %d): the sink says it is still open",
					k.ID, k.Producer, k.Epoch)}
			}
			open = append(open, seen[k])
		}
		if len(open) > 0 {
			return walkStep{abort: open}
		}
		if err := checkWalkBack(*m, covered, rejected, lost); err != nil {
			return walkStep{notes: notes, err: err}
		}
		if len(rejected) > 0 {
			notes = append(notes, walkNote{msg: "restoring an earlier checkpoint; the output of the later ones is derived again", checkpoint: m.Checkpoint})
		}
		return walkStep{notes: notes, restore: m}
	}
	return walkStep{notes: notes, err: fmt.Errorf("%w for task %d: %s", ErrNoValidCheckpoint, w.task, strings.Join(lost, "; "))}
}

// forgotten says why a transaction can be unknown to everyone.
const forgotten = "the broker expired its transactional id (transactional.id.expiration.ms, 7 days by default) " +
	"or re-initialised it, no later checkpoint recorded its commit, and the output's log does not show its marker"

func describeTxn(c checkpoint.Committable) string {
	return fmt.Sprintf("%s (producer %d, epoch %d)", c.TransactionalID, c.ProducerID, c.Epoch)
}

// sortedKeys returns the keys of m in a fixed order, so that the walk asks
// the same questions in the same order every time.
func sortedKeys(m map[checkpoint.TxnKey]CommitOutcome) []checkpoint.TxnKey {
	keys := make([]checkpoint.TxnKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b checkpoint.TxnKey) int {
		return cmp.Or(cmp.Compare(a.Operator, b.Operator), cmp.Compare(a.ID, b.ID), cmp.Compare(a.Producer, b.Producer),
			cmp.Compare(a.Epoch, b.Epoch), cmp.Compare(a.Data, b.Data))
	})
	return keys
}

// checkWalkBack refuses to restore m when a newer, rejected checkpoint had
// a transaction committed (or of unknown fate) that m does not cover:
// replaying from m would write that output a second time. why says what
// made the newer ones unusable.
func checkWalkBack(m checkpoint.Manifest, covered map[checkpoint.TxnKey]bool, rejected map[checkpoint.TxnKey]CommitOutcome, why []string) error {
	for _, k := range sortedKeys(rejected) {
		if covered[k] {
			continue
		}
		switch rejected[k] {
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

func committables(m checkpoint.Manifest) []checkpoint.Committable {
	var cs []checkpoint.Committable
	for _, a := range m.Operators {
		cs = append(cs, a.Committables...)
	}
	return cs
}
