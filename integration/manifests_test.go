package integration

import (
	"context"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/weirstream/weir/checkpoint"
)

// manifests returns every readable manifest of a task of j, oldest first.
func (j *countJob) manifests(ctx context.Context, task int) []checkpoint.Manifest {
	j.t.Helper()
	st, err := checkpoint.NewFile(j.checkpoints)
	if err != nil {
		j.t.Fatal(err)
	}
	ids, _, err := checkpoint.ListCheckpoints(ctx, st, j.name, task)
	if err != nil {
		j.t.Fatalf("list checkpoints of task %d: %v", task, err)
	}
	var ms []checkpoint.Manifest
	for _, id := range ids {
		m, err := checkpoint.ReadManifest(ctx, st, j.name, task, id)
		if err != nil {
			j.t.Logf("task %d: manifest %d unreadable: %v", task, id, err)
			continue
		}
		ms = append(ms, m)
	}
	return ms
}

// manifest reads one manifest of a task of j.
func (j *countJob) manifest(ctx context.Context, task int, id checkpoint.ID) checkpoint.Manifest {
	j.t.Helper()
	st, err := checkpoint.NewFile(j.checkpoints)
	if err != nil {
		j.t.Fatal(err)
	}
	m, err := checkpoint.ReadManifest(ctx, st, j.name, task, id)
	if err != nil {
		j.t.Fatalf("read manifest %d of task %d: %v", id, task, err)
	}
	return m
}

func committablesOf(m checkpoint.Manifest) []checkpoint.Committable {
	var cs []checkpoint.Committable
	for _, a := range m.Operators {
		cs = append(cs, a.Committables...)
	}
	return cs
}

// txnRecord is the transaction coordinator's record of a transactional id.
type txnRecord struct {
	State    string // DescribeTransactions state, "NotFound" if none
	Producer int64
	Epoch    int16
}

// describeTxn asks the transaction coordinator about a transactional id.
func describeTxn(ctx context.Context, t *testing.T, adm *kadm.Client, id string) txnRecord {
	t.Helper()
	ds, err := adm.DescribeTransactions(ctx, id)
	if err == nil {
		d, ok := ds[id]
		if !ok {
			t.Fatalf("describe transaction %s: no answer", id)
		}
		err = d.Err
		if err == nil {
			return txnRecord{State: d.State, Producer: d.ProducerID, Epoch: d.ProducerEpoch}
		}
	}
	if errors.Is(err, kerr.TransactionalIDNotFound) {
		return txnRecord{State: "NotFound", Producer: -1, Epoch: -1}
	}
	t.Fatalf("describe transaction %s: %v", id, err)
	return txnRecord{}
}

// open reports whether the coordinator still has c's transaction open: the
// owner has neither committed nor aborted it, nor has anyone else.
func (r txnRecord) open(c checkpoint.Committable) bool {
	return r.State == "Ongoing" && r.Producer == c.ProducerID && r.Epoch == c.Epoch
}
