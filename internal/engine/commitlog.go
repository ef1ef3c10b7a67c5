package engine

import (
	"slices"

	"github.com/weirstream/weir/checkpoint"
)

// commitLog is a sink's account of what checkpoint storage has to learn
// about its transactions: a pure core, fed by the sink operator on its
// root's goroutine.
//
// The SinkWriter contract says that once Commit(id) returns, every
// committable PreCommit(id) returned is committed (it lists every pre-commit
// not yet committed). From then on the log reports those committables as
// committed in the ack of every barrier, until a checkpoint whose ack
// carried them completes: then a durable manifest records their commit,
// and restore no longer needs the external system to remember it. (A
// Kafka sink reuses a transactional id only once a manifest that does not
// list the transaction as pending is durable; such a manifest was
// pre-committed after the commit, so it carries it here.)
type commitLog struct {
	// precommitted are the committables each barrier's PreCommit returned,
	// ascending by checkpoint, until a completion at or after it.
	precommitted []precommit
	// unrecorded are committed transactions that no completed checkpoint's
	// manifest records yet.
	unrecorded []unrecorded
}

type precommit struct {
	id checkpoint.ID
	cs []checkpoint.Committable
}

type unrecorded struct {
	c checkpoint.Committable
	// reported is the newest checkpoint whose ack carried c; 0: none yet.
	reported checkpoint.ID
}

// restored takes the committables recovery committed when the sink opened.
func (l *commitLog) restored(cs []checkpoint.Committable) {
	for _, c := range cs {
		l.add(c)
	}
}

// barrier records what PreCommit(id) returned and returns the committed
// transactions the ack of id reports.
func (l *commitLog) barrier(id checkpoint.ID, cs []checkpoint.Committable) []checkpoint.Committable {
	if len(cs) > 0 {
		l.precommitted = append(l.precommitted, precommit{id: id, cs: cs})
	}
	if len(l.unrecorded) == 0 {
		return nil
	}
	out := make([]checkpoint.Committable, len(l.unrecorded))
	for i := range l.unrecorded {
		l.unrecorded[i].reported = max(l.unrecorded[i].reported, id)
		out[i] = l.unrecorded[i].c
	}
	return out
}

// completed records that Commit(id) returned: what the barriers up to id
// pre-committed is committed now, and what a checkpoint up to id reported
// committed is recorded in its durable manifest.
func (l *commitLog) completed(id checkpoint.ID) {
	l.unrecorded = slices.DeleteFunc(l.unrecorded, func(u unrecorded) bool { return u.reported != 0 && u.reported <= id })
	n := 0
	for _, p := range l.precommitted {
		if p.id > id {
			break
		}
		for _, c := range p.cs {
			l.add(c)
		}
		n++
	}
	l.precommitted = slices.Delete(l.precommitted, 0, n)
}

func (l *commitLog) add(c checkpoint.Committable) {
	k := c.Key()
	for _, u := range l.unrecorded {
		if u.c.Key() == k {
			return
		}
	}
	l.unrecorded = append(l.unrecorded, unrecorded{c: c})
}

// pending returns the committed transactions no completed checkpoint
// records: what a commit record must name once the task's last checkpoint
// completed.
func (l *commitLog) pending() []checkpoint.Committable {
	out := make([]checkpoint.Committable, len(l.unrecorded))
	for i, u := range l.unrecorded {
		out[i] = u.c
	}
	return out
}
