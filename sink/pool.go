package sink

import (
	"errors"
	"fmt"
	"slices"

	"github.com/weirstream/weir/checkpoint"
)

// ErrNoFreeSlot is wrapped by the error a sink returns when it must begin a
// transaction and every transactional id of its pool still holds one that a
// restore may need. See CheckPoolSize.
var ErrNoFreeSlot = errors.New("no free transactional slot")

// slotState is where one transactional id of the pool is in its cycle:
//
//	free -> open -> preCommitted -> committed -> free
//
// plus restored: a slot whose transaction the restored manifest names, which
// recovery committed; it is re-initialised (fenced) before reuse.
type slotState uint8

const (
	slotFree slotState = iota
	slotOpen
	slotPreCommitted
	slotCommitted
	slotRestored
)

func (s slotState) String() string {
	switch s {
	case slotFree:
		return "free"
	case slotOpen:
		return "open"
	case slotPreCommitted:
		return "pre-committed"
	case slotCommitted:
		return "committed"
	case slotRestored:
		return "restored"
	}
	return fmt.Sprintf("slotState(%d)", uint8(s))
}

type slot struct {
	state slotState
	// checkpoint is the barrier the transaction was pre-committed at.
	checkpoint checkpoint.ID
	// listed is the newest checkpoint whose PreCommit returned this
	// transaction's committable: the newest manifest that may name it.
	listed      checkpoint.ID
	committable checkpoint.Committable
}

// pool is the bookkeeping of a task's transactional ids, a pure core without
// I/O: the writer asks it which slot to use and what to commit, does the
// Kafka work, and reports back.
//
// The invariant it keeps (DESIGN.md): a slot whose transaction a manifest
// may name is not reused until a later manifest is durable. A manifest names
// every transaction pre-committed but not committed when its PreCommit ran,
// so a committed transaction's slot is free once a checkpoint newer than the
// newest PreCommit that listed it completed. Then the committables of the
// newest durable manifest always name transactions nothing reused, and
// resuming them is safe.
type pool struct {
	// slots are taken lowest free first. In steady state a task cycles
	// through three (one open, one pre-committed, one committed and held
	// until the next completion); the others serve failed checkpoints
	// only. Round robin made every transaction of a task's first K
	// intervals start on a client that had never written: its first
	// record waited for the output topic's metadata (in franz-go's
	// unknown-topic buffer, 3% of a 64-task worker's CPU, and a stall per
	// transaction in every run shorter than K intervals). The price: a
	// slot idle past the broker's transactional.id.expiration.ms (7 days
	// by default) is forgotten, and its first transaction after that
	// fails with INVALID_PRODUCER_ID_MAPPING; the task fails loudly and
	// its restart initialises every slot again. Re-initialising such a
	// slot in place would not be safe: a zombie doing it un-fences itself.
	slots []slot
	// durable is the newest checkpoint known complete (its manifest is
	// durable); 0 before any.
	durable checkpoint.ID
}

func newPool(k int) *pool { return &pool{slots: make([]slot, k)} }

// restored marks slots whose transactions recovery committed: they hold the
// restored manifest's committables until a later manifest is durable.
func (p *pool) restored(i int, c checkpoint.Committable) {
	p.slots[i] = slot{state: slotRestored, committable: c}
}

// acquire opens a free slot for the next transaction.
func (p *pool) acquire() (int, error) {
	k := len(p.slots)
	for i := range k {
		if p.slots[i].state == slotFree {
			p.slots[i] = slot{state: slotOpen}
			return i, nil
		}
	}
	return -1, fmt.Errorf("%w: all %d are held (%s); raise the pool size or fix what fails checkpoints",
		ErrNoFreeSlot, k, p.describe())
}

func (p *pool) describe() string {
	counts := map[slotState]int{}
	for _, s := range p.slots {
		counts[s.state]++
	}
	return fmt.Sprintf("%d pre-committed waiting for a checkpoint to complete, %d committed waiting for a later manifest, %d restored, %d open",
		counts[slotPreCommitted], counts[slotCommitted], counts[slotRestored], counts[slotOpen])
}

// preCommit records that slot i's open transaction was flushed at barrier id.
func (p *pool) preCommit(i int, id checkpoint.ID, c checkpoint.Committable) {
	p.slots[i] = slot{state: slotPreCommitted, checkpoint: id, committable: c}
}

// pending lists the committables of every pre-committed transaction, oldest
// first, and remembers that the manifest of checkpoint id names them.
func (p *pool) pending(id checkpoint.ID) []checkpoint.Committable {
	var idx []int
	for i := range p.slots {
		if p.slots[i].state == slotPreCommitted {
			p.slots[i].listed = max(p.slots[i].listed, id)
			idx = append(idx, i)
		}
	}
	slices.SortFunc(idx, func(a, b int) int { return cmpID(p.slots[a].checkpoint, p.slots[b].checkpoint) })
	cs := make([]checkpoint.Committable, 0, len(idx))
	for _, i := range idx {
		cs = append(cs, p.slots[i].committable)
	}
	return cs
}

// toCommit lists the slots whose transactions checkpoint id's completion
// commits: every pre-committed one up to id, oldest first.
func (p *pool) toCommit(id checkpoint.ID) []int {
	var idx []int
	for i, s := range p.slots {
		if s.state == slotPreCommitted && s.checkpoint <= id {
			idx = append(idx, i)
		}
	}
	slices.SortFunc(idx, func(a, b int) int { return cmpID(p.slots[a].checkpoint, p.slots[b].checkpoint) })
	return idx
}

func (p *pool) committed(i int) { p.slots[i].state = slotCommitted }

// complete records that checkpoint id's manifest is durable (after its
// transactions committed). It frees every committed slot no durable manifest
// newer than id's predecessors names, and returns the restored slots, which
// the writer re-initialises and then frees with reinitialised.
func (p *pool) complete(id checkpoint.ID) (restored []int) {
	p.durable = max(p.durable, id)
	for i, s := range p.slots {
		switch {
		case s.state == slotCommitted && s.listed < p.durable:
			p.slots[i] = slot{}
		case s.state == slotRestored:
			// Restored transactions were committed before this writer
			// pre-committed anything, so no manifest it wrote names them:
			// any completed checkpoint supersedes the restored one.
			restored = append(restored, i)
		}
	}
	return restored
}

func (p *pool) reinitialised(i int) { p.slots[i] = slot{} }

func cmpID(a, b checkpoint.ID) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
