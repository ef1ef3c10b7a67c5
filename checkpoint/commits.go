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

// Commit records. A manifest names the transactions its checkpoint
// pre-committed; whether they were committed afterwards is, at first, only
// in the transaction coordinator's memory, and a broker forgets: it expires
// a transactional id unused for transactional.id.expiration.ms (7 days by
// default), and a re-initialised id keeps no record of its earlier
// transactions. So weir keeps its own record, in checkpoint storage:
//
//   - while a task runs, each sink reports in the manifest of every
//     checkpoint the transactions it committed that no completed checkpoint
//     recorded yet (Ack.Committed), and reuses a transactional id only once
//     such a manifest is durable;
//   - after the final checkpoint of a drain or of a bounded input, which no
//     later manifest follows, the task writes a CommitRecord next to it;
//   - a person who found out what became of transactions the broker forgot
//     writes one with `processor checkpoints record`.
//
// Restore takes a transaction these records name as committed (or
// aborted), whatever the coordinator says now.

// commitRecordFile is a CommitRecord's name in its owner's folder of a
// checkpoint (OwnerDir).
const commitRecordFile = "committed.json"

// CommitRecordVersion is the format of CommitRecord this code writes.
const CommitRecordVersion = 1

// CommitRecord says what became of transactions of checkpoint Checkpoint
// of a task: the owner with Epoch committed them, or (written by hand with
// `processor checkpoints record`, when the broker forgot them) a person
// found them committed or aborted.
type CommitRecord struct {
	Version    int           `json:"version"`
	Job        string        `json:"job"`
	Task       int           `json:"task"`
	Checkpoint ID            `json:"checkpoint"`
	Epoch      int64         `json:"epoch"`
	Timestamp  time.Time     `json:"timestamp"`
	Committed  []Committable `json:"committed,omitempty"`
	Aborted    []Committable `json:"aborted,omitempty"`
	// By says who decided: empty for the task itself, else what
	// `processor checkpoints record` was told or found.
	By string `json:"by,omitempty"`
}

// CommitRecordName is the object name of the commit record that attempt of
// the owner with epoch writes for checkpoint id: in its own folder, so no
// two owners or attempts write the same object.
func CommitRecordName(job string, task int, id ID, epoch int64, attempt string) string {
	return OwnerDir(job, task, id, epoch, attempt) + commitRecordFile
}

// WriteCommitRecord stores r under the name attempt gives it. It is written
// once, never rewritten.
func WriteCommitRecord(ctx context.Context, st Storage, r CommitRecord, attempt string) error {
	r.Version = CommitRecordVersion
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode commit record of checkpoint %d: %w", r.Checkpoint, err)
	}
	name := CommitRecordName(r.Job, r.Task, r.Checkpoint, r.Epoch, attempt)
	if err := st.PutIfAbsent(ctx, name, append(b, '\n')); err != nil {
		return fmt.Errorf("write commit record %s: %w", name, err)
	}
	return nil
}

// ReadCommitRecord reads the commit record named name (from a TaskListing).
// A record that does not decode, or that names another job or task than
// its place, is refused (ErrCorrupt).
func ReadCommitRecord(ctx context.Context, st Storage, job string, task int, name string) (CommitRecord, error) {
	rc, err := st.Get(ctx, name)
	if err != nil {
		return CommitRecord{}, fmt.Errorf("read commit record %s: %w", name, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxManifestSize+1))
	if err != nil {
		return CommitRecord{}, fmt.Errorf("read commit record %s: %w", name, err)
	}
	var r CommitRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return CommitRecord{}, fmt.Errorf("read commit record %s: %w: %w", name, ErrCorrupt, err)
	}
	if r.Version != CommitRecordVersion {
		return CommitRecord{}, fmt.Errorf("read commit record %s: unsupported version %d (this build reads %d)", name, r.Version, CommitRecordVersion)
	}
	id, _, _ := parseCheckpointObject(job, task, name)
	if r.Job != job || r.Task != task || r.Checkpoint != id {
		return CommitRecord{}, fmt.Errorf("read commit record %s: %w: it describes job %q task %d checkpoint %d",
			name, ErrCorrupt, r.Job, r.Task, r.Checkpoint)
	}
	return r, nil
}

// isCommitRecord says whether rest, an object name past its checkpoint's
// folder, is a commit record in an owner's folder.
func isCommitRecord(rest string) bool {
	dir, file, ok := strings.Cut(rest, "/")
	return ok && file == commitRecordFile && strings.HasPrefix(dir, "e")
}

// TxnKey identifies one transaction: for Kafka, a transactional id under
// one producer id and epoch; for other sinks, what their Data says.
type TxnKey struct {
	Operator string
	ID       string
	Producer int64
	Epoch    int16
	Data     string
}

// Key is the transaction c names.
func (c Committable) Key() TxnKey {
	return TxnKey{Operator: c.Operator, ID: c.TransactionalID, Producer: c.ProducerID, Epoch: c.Epoch, Data: string(c.Data)}
}

// Recorded is what checkpoint storage records of transactions.
type Recorded struct {
	Committed map[TxnKey]bool
	// Aborted are transactions a person recorded as aborted (and no one as
	// committed: a commit is evidence, a verdict by hand is not).
	Aborted map[TxnKey]bool
}

// ReadRecorded gathers what a task's manifests ms (Ack.Committed; a
// zombie's count too, a commit is a fact whoever made it) and its commit
// records (names from ListTask; one deleted since the listing is skipped)
// record of its transactions.
func ReadRecorded(ctx context.Context, st Storage, job string, task int, ms []Manifest, records []string) (Recorded, error) {
	r := Recorded{Committed: map[TxnKey]bool{}, Aborted: map[TxnKey]bool{}}
	for _, m := range ms {
		for _, a := range m.Operators {
			for _, c := range a.Committed {
				r.Committed[c.Key()] = true
			}
		}
	}
	var aborted []Committable
	for _, name := range records {
		cr, err := ReadCommitRecord(ctx, st, job, task, name)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return Recorded{}, err
		}
		for _, c := range cr.Committed {
			r.Committed[c.Key()] = true
		}
		aborted = append(aborted, cr.Aborted...)
	}
	for _, c := range aborted {
		if !r.Committed[c.Key()] {
			r.Aborted[c.Key()] = true
		}
	}
	return r, nil
}

// Knows reports whether r records what became of c.
func (r Recorded) Knows(c Committable) bool { return r.Committed[c.Key()] || r.Aborted[c.Key()] }
