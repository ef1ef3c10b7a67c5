package sink

import (
	"errors"
	"fmt"
	"slices"
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

// sinkModel drives a pool the way txnWriter does, without Kafka: a slot is
// picked after open and after every pre-commit and commit (openNext), and a
// write that finds none fails the task with ErrNoFreeSlot.
type sinkModel struct {
	p     *pool
	cur   int
	fails int // consecutive failed checkpoints
	id    checkpoint.ID
}

func (m *sinkModel) clone() *sinkModel {
	c := *m
	c.p = &pool{slots: slices.Clone(m.p.slots), durable: m.p.durable}
	return &c
}

func (m *sinkModel) openNext() {
	if m.cur < 0 {
		if i, err := m.p.acquire(); err == nil {
			m.cur = i
		}
	}
}

// checkpoint runs a barrier's PreCommit after an interval of writes, then
// writes on while the checkpoint completes or fails, as a task does: its
// Commit comes after the upload. Writing never frees a slot, so a model
// that always writes finds every sequence that runs out.
func (m *sinkModel) checkpoint() error {
	m.id++
	m.p.preCommit(m.cur, m.id, committable(fmt.Sprint(m.id)))
	m.cur = -1
	m.openNext()
	m.p.pending(m.id)
	if m.cur < 0 {
		i, err := m.p.acquire()
		if err != nil {
			return err
		}
		m.cur = i
	}
	return nil
}

func (m *sinkModel) completed() {
	for _, i := range m.p.toCommit(m.id) {
		m.p.committed(i)
	}
	for _, i := range m.p.complete(m.id) {
		m.p.reinitialised(i)
	}
	m.fails = 0
	m.openNext()
}

// runsOut searches every sequence of depth checkpoints (each completed or
// failed, at most f failures in a row as the coordinator allows) for one
// that leaves the sink no slot to write into; it returns that sequence.
func runsOut(m *sinkModel, f, depth int, path string) (string, bool) {
	if depth == 0 {
		return "", false
	}
	for _, ok := range []bool{true, false} {
		if !ok && m.fails == f {
			continue // the (f+1)th failure fails the task: a restore follows
		}
		c := m.clone()
		step := fmt.Sprintf("%s%d:", path, c.id+1)
		if err := c.checkpoint(); err != nil {
			return step + "no slot", true
		}
		if ok {
			c.completed()
			step += "completed "
		} else {
			c.fails++
			step += "failed "
		}
		if seq, out := runsOut(c, f, depth-1, step); out {
			return seq, true
		}
	}
	return "", false
}

// PoolSizeFor(f) slots survive every sequence of failed and completed
// checkpoints with at most f failures in a row, from a fresh start and from
// a restore whose manifest names up to f+1 transactions; one slot fewer
// runs out. The sequence the review found (f=3, pool f+3: three failures, a
// completion, a failure) is one of those searched.
func TestPoolSizeForSurvivesToleratedFailures(t *testing.T) {
	for f := range 4 {
		k := PoolSizeFor(f)
		if err := CheckPoolSize(k, f); err != nil {
			t.Fatalf("CheckPoolSize(%d, %d): %v", k, f, err)
		}
		if err := CheckPoolSize(k-1, f); err == nil {
			t.Fatalf("CheckPoolSize(%d, %d) accepted a pool that can run out", k-1, f)
		}
		depth := 2*f + 6
		for restored := 0; restored <= f+1; restored++ {
			start := func(k int) *sinkModel {
				m := &sinkModel{p: newPool(k), cur: -1, id: 100}
				for i := range restored {
					m.p.restored(i, committable(fmt.Sprint("r", i)))
				}
				m.openNext()
				if m.cur < 0 {
					t.Fatalf("pool %d with %d restored: no slot to start with", k, restored)
				}
				return m
			}
			if seq, out := runsOut(start(k), f, depth, ""); out {
				t.Errorf("f=%d, %d restored, pool %d: runs out after %s", f, restored, k, seq)
			}
			if restored == 0 || restored == f+1 {
				seq, out := runsOut(start(k-1), f, depth, "")
				if !out {
					t.Errorf("f=%d, %d restored: pool %d never runs out; PoolSizeFor is not tight", f, restored, k-1)
				} else {
					t.Logf("f=%d, %d restored, pool %d runs out after %s", f, restored, k-1, seq)
				}
			}
		}
	}
	// The review's sequence against the old bound f+3, f=3: three
	// failures, a completion, a failure, and the writes after the next
	// barrier find no slot.
	m := &sinkModel{p: newPool(3 + MinPoolSize), cur: -1}
	m.openNext()
	var err error
	for i, ok := range []bool{false, false, false, true, false, false} {
		if err = m.checkpoint(); err != nil {
			if i != 5 {
				t.Fatalf("f+3 ran out at checkpoint %d, want 6", i+1)
			}
			break
		}
		if ok {
			m.completed()
		} else {
			m.fails++
		}
	}
	if !errors.Is(err, ErrNoFreeSlot) {
		t.Fatalf("f+3 slots survived 3 failures, a completion and a failure: %v", err)
	}
	t.Logf("f+3 with f=3: %v", err)
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
