package sink

import (
	"errors"
	"testing"

	"github.com/weirstream/weir/checkpoint"
)

func committable(txn string) checkpoint.Committable {
	return checkpoint.Committable{Operator: "out", TransactionalID: txn}
}

// A scripted writer life: which slot each transaction gets, and when a slot
// becomes usable again.
func TestPoolSlotsNotReusedBeforeLaterManifest(t *testing.T) {
	p := newPool(3)
	mustAcquire := func(want int) {
		t.Helper()
		i, err := p.acquire()
		if err != nil || i != want {
			t.Fatalf("acquire = %d, %v; want slot %d", i, err, want)
		}
	}
	mustAcquire(0)
	p.preCommit(0, 1, committable("t-0"))
	if got := p.pending(1); len(got) != 1 || got[0].TransactionalID != "t-0" {
		t.Fatalf("pending(1) = %v", got)
	}
	mustAcquire(1) // the next transaction, while checkpoint 1 is in flight
	for _, i := range p.toCommit(1) {
		p.committed(i)
	}
	p.complete(1)
	// Manifest 1 names slot 0's transaction: it stays held although
	// committed, so a restore of checkpoint 1 finds it untouched.
	if p.slots[0].state != slotCommitted {
		t.Fatalf("slot 0 after complete(1) is %v, want committed (held)", p.slots[0].state)
	}
	p.preCommit(1, 2, committable("t-1"))
	if got := p.pending(2); len(got) != 1 || got[0].TransactionalID != "t-1" {
		t.Fatalf("pending(2) = %v, want only t-1 (t-0 is committed)", got)
	}
	mustAcquire(2)
	if _, err := p.acquire(); !errors.Is(err, ErrNoFreeSlot) {
		t.Fatalf("acquire with slots 0 (held), 1 (pre-committed), 2 (open): %v, want ErrNoFreeSlot", err)
	}
	for _, i := range p.toCommit(2) {
		p.committed(i)
	}
	p.complete(2) // manifest 2 does not name t-0: slot 0 is free
	if p.slots[0].state != slotFree || p.slots[1].state != slotCommitted {
		t.Fatalf("after complete(2): slot 0 %v (want free), slot 1 %v (want committed)", p.slots[0].state, p.slots[1].state)
	}
	p.preCommit(2, 3, committable("t-2"))
	mustAcquire(0)
}

// When a commit notification arrives after the next barrier, the next
// manifest names the transaction too: its slot is held one checkpoint longer.
func TestPoolCommitAfterNextBarrier(t *testing.T) {
	p := newPool(5)
	i, _ := p.acquire()
	p.preCommit(i, 1, committable("a"))
	p.pending(1)
	j, _ := p.acquire()
	p.preCommit(j, 2, committable("b"))
	if got := p.pending(2); len(got) != 2 || got[0].TransactionalID != "a" || got[1].TransactionalID != "b" {
		t.Fatalf("pending(2) = %v, want [a b] oldest first", got)
	}
	for _, k := range p.toCommit(1) {
		if k != i {
			t.Fatalf("toCommit(1) includes slot %d of checkpoint 2", k)
		}
		p.committed(k)
	}
	p.complete(1)
	for _, k := range p.toCommit(2) {
		p.committed(k)
	}
	p.complete(2)
	if p.slots[i].state != slotCommitted {
		t.Fatalf("slot of a after complete(2): %v, want held (manifest 2 names a)", p.slots[i].state)
	}
	p.complete(3)
	if p.slots[i].state != slotFree || p.slots[j].state != slotFree {
		t.Fatalf("after complete(3): %v, %v; want both free", p.slots[i].state, p.slots[j].state)
	}
}

// Aborted checkpoints keep their transactions pending; they go into every
// later PreCommit and commit with the next completed checkpoint.
func TestPoolAbortedCheckpointsCarryOver(t *testing.T) {
	p := newPool(MinPoolSize + 2)
	for id := checkpoint.ID(1); id <= 3; id++ {
		i, err := p.acquire()
		if err != nil {
			t.Fatal(err)
		}
		p.preCommit(i, id, committable(string(rune('a'+id-1))))
		if got := p.pending(id); len(got) != int(id) {
			t.Fatalf("pending(%d) has %d committables, want %d", id, len(got), id)
		}
	}
	if got := p.toCommit(3); len(got) != 3 {
		t.Fatalf("toCommit(3) = %v, want all three", got)
	}
}

// With f failed checkpoints in a row the sink holds f+3 slots (CheckPoolSize).
func TestPoolSizeMatchesCheckPoolSize(t *testing.T) {
	for f := range 4 {
		k := f + MinPoolSize
		if err := CheckPoolSize(k, f); err != nil {
			t.Fatalf("CheckPoolSize(%d, %d): %v", k, f, err)
		}
		if err := CheckPoolSize(k-1, f); err == nil {
			t.Fatalf("CheckPoolSize(%d, %d) accepted a pool that runs out", k-1, f)
		}
		p := newPool(k)
		// Checkpoint 1 completes; 2..f+1 fail; f+2 is pre-committed; the
		// writer then needs a slot for the next transaction.
		id := checkpoint.ID(1)
		i, _ := p.acquire()
		p.preCommit(i, id, committable("c1"))
		p.pending(id)
		for _, s := range p.toCommit(id) {
			p.committed(s)
		}
		p.complete(id)
		for range f + 1 {
			id++
			i, err := p.acquire()
			if err != nil {
				t.Fatalf("f=%d: checkpoint %d: %v", f, id, err)
			}
			p.preCommit(i, id, committable("c"))
			p.pending(id)
		}
		if _, err := p.acquire(); err != nil {
			t.Fatalf("f=%d, pool %d: no slot for the transaction after checkpoint %d: %v", f, k, id, err)
		}
		if _, err := p.acquire(); !errors.Is(err, ErrNoFreeSlot) {
			t.Fatalf("f=%d, pool %d: a further slot was free: %v", f, k, err)
		}
	}
}

func TestPoolRestoredSlotsWaitForACompletedCheckpoint(t *testing.T) {
	p := newPool(3)
	p.restored(1, committable("r"))
	if i, _ := p.acquire(); i != 0 {
		t.Fatalf("acquire = %d, want 0", i)
	}
	if i, _ := p.acquire(); i != 2 {
		t.Fatalf("acquire = %d, want 2 (slot 1 holds a restored transaction)", i)
	}
	if _, err := p.acquire(); !errors.Is(err, ErrNoFreeSlot) {
		t.Fatalf("acquire: %v, want ErrNoFreeSlot", err)
	}
	if got := p.pending(7); len(got) != 0 {
		t.Fatalf("pending lists restored (already committed) transactions: %v", got)
	}
	re := p.complete(7)
	if len(re) != 1 || re[0] != 1 {
		t.Fatalf("complete returned %v, want [1] to re-initialise", re)
	}
	p.reinitialised(1)
	if i, err := p.acquire(); err != nil || i != 1 {
		t.Fatalf("acquire after re-init = %d, %v; want 1", i, err)
	}
}
