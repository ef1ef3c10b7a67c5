package worker

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The workers of a job form one Kafka consumer group, used only for
// membership and assignment: tasks read their partitions by direct
// assignment from checkpointed offsets, never through the group. The group
// runs franz-go's classic (JoinGroup/SyncGroup) protocol with the balancer
// below, cooperative like Kafka's CooperativeStickyAssignor and Kafka
// Connect's incremental protocol: a rebalance moves only the tasks it must,
// and a task that moves is first given up by its owner (a final checkpoint)
// in one round, then given to its new owner in the next. The classic
// protocol is the one where the leader's balancer decides, and it can hand
// each member bytes of its own (here: the fencing epoch); KIP-848's
// server-side assignors cannot.
//
// franz-go tracks the assignment as partitions of the first input topic:
// partition p stands for task p (partition p of every input topic). The
// worker pauses fetching that topic, so the group client reads nothing.

// protocolName names the balancer in JoinGroup; all workers of a job must
// speak it.
const protocolName = "weir-tasks-v1"

// memberMeta is what a worker tells the group when it joins (JoinGroup
// metadata). It must not change between joins unless something changed:
// the coordinator compares it to decide whether a join means a rebalance.
type memberMeta struct {
	Version int `json:"v"`
	// Tasks are the tasks the worker runs now.
	Tasks []int `json:"tasks"`
	// Topics are the worker's input topics.
	Topics []string `json:"topics"`
	// Host and HTTP say where the worker's status page is.
	Host string `json:"host,omitempty"`
	HTTP string `json:"http,omitempty"`
}

// memberAssignment is what the leader tells each worker (SyncGroup).
type memberAssignment struct {
	Version int `json:"v"`
	// Epoch is the fencing epoch of the tasks this round gives the worker.
	Epoch int64 `json:"epoch"`
	Tasks []int `json:"tasks"`
}

// planTasks decides one round of a cooperative rebalance of n tasks over
// members (ids sorted), where owned[i] are the tasks member i runs now. It
// returns, per member, the tasks it runs after this round:
//
//   - every member gets n/m tasks or one more (the members that own more
//     now get the extra ones first);
//   - a member keeps as many of the tasks it owns as its share allows
//     (sticky), the lowest first;
//   - the tasks nobody owns go to the members under their share;
//   - a task that moves from its owner to another member goes to nobody in
//     this round: the owner gives it up and rejoins, and the next round
//     finds it unowned. A task two members claim is kept by the first.
func planTasks(owned [][]int, n int) [][]int {
	m := len(owned)
	out := make([][]int, m)
	if m == 0 || n <= 0 {
		return out
	}
	owner := make([]int, n)
	for t := range owner {
		owner[t] = -1
	}
	mine := make([][]int, m)
	for i, ts := range owned {
		for _, t := range ts {
			if t >= 0 && t < n && owner[t] < 0 {
				owner[t] = i
				mine[i] = append(mine[i], t)
			}
		}
		slices.Sort(mine[i])
	}
	order := make([]int, m)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(len(mine[b]), len(mine[a])) })
	quota := make([]int, m)
	for rank, i := range order {
		quota[i] = n / m
		if rank < n%m {
			quota[i]++
		}
	}
	target := make([][]int, m)
	var free []int
	for i := range m {
		keep := min(quota[i], len(mine[i]))
		target[i] = append(target[i], mine[i][:keep]...)
		free = append(free, mine[i][keep:]...)
	}
	for t := range n {
		if owner[t] < 0 {
			free = append(free, t)
		}
	}
	slices.Sort(free)
	for i := range m {
		for len(target[i]) < quota[i] && len(free) > 0 {
			target[i] = append(target[i], free[0])
			free = free[1:]
		}
	}
	for i := range m {
		for _, t := range target[i] {
			if owner[t] < 0 || owner[t] == i {
				out[i] = append(out[i], t)
			}
		}
		slices.Sort(out[i])
	}
	return out
}

// balancer is the worker's kgo.GroupBalancer. The leader's MemberBalancer
// plans the round and allocates the fencing epoch of the tasks it hands
// out; every member learns its tasks and that epoch in ParseSyncAssignment,
// which franz-go calls before OnPartitionsAssigned.
type balancer struct {
	topics []string // input topics; franz-go tracks topics[0]
	// partitions is the job's recorded partition count (its layout
	// record), the number of tasks: the balancer plans from it, not from
	// the metadata the group's leader sees, so that a partition added to
	// the input never becomes a task (the job stops on the change).
	partitions int32
	meta       func() memberMeta
	// givenUp, if set, tells the tasks to leave out of the join metadata.
	givenUp func(task int) bool
	// newEpoch allocates a fencing epoch (checkpoint.NextEpoch): larger
	// than every epoch before, across generations and a deleted group.
	newEpoch func(context.Context) (int64, error)

	mu    sync.Mutex
	epoch int64 // of the last assignment received
}

var _ kgo.GroupBalancer = (*balancer)(nil)

func (b *balancer) ProtocolName() string { return protocolName }
func (b *balancer) IsCooperative() bool  { return true }

func (b *balancer) JoinGroupMetadata(_ []string, current map[string][]int32, _ int32) []byte {
	m := b.meta()
	m.Version, m.Topics, m.Tasks = 1, b.topics, []int{}
	for _, p := range current[b.topics[0]] {
		if b.givenUp == nil || !b.givenUp(int(p)) {
			m.Tasks = append(m.Tasks, int(p))
		}
	}
	slices.Sort(m.Tasks)
	out, _ := json.Marshal(m) // plain data: cannot fail
	return out
}

// decodeAssignment reads an assignment; one that is not ours (kfake hands
// a member without one an empty consumer-protocol assignment) is empty.
func decodeAssignment(raw []byte) (memberAssignment, error) {
	var a memberAssignment
	if len(bytes.TrimSpace(raw)) == 0 || raw[0] != '{' {
		return a, nil
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		return a, fmt.Errorf("group assignment: %w", err)
	}
	return a, nil
}

func (b *balancer) ParseSyncAssignment(raw []byte) (map[string][]int32, error) {
	a, err := decodeAssignment(raw)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	if a.Epoch != 0 {
		b.epoch = a.Epoch
	}
	b.mu.Unlock()
	ps := make([]int32, len(a.Tasks))
	for i, t := range a.Tasks {
		ps[i] = int32(t)
	}
	return map[string][]int32{b.topics[0]: ps}, nil
}

// currentEpoch is the epoch of the last assignment: the epoch of the tasks
// OnPartitionsAssigned adds.
func (b *balancer) currentEpoch() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.epoch
}

func (b *balancer) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	mb := &memberBalancer{b: b, ids: make([]string, len(members)), owned: make([][]int, len(members))}
	topics := map[string]struct{}{}
	for _, t := range b.topics {
		topics[t] = struct{}{}
	}
	for i, mem := range members {
		var meta memberMeta
		if err := json.Unmarshal(mem.ProtocolMetadata, &meta); err != nil {
			return nil, nil, fmt.Errorf("member %s: metadata: %w", mem.MemberID, err)
		}
		if !slices.Equal(meta.Topics, b.topics) {
			return nil, nil, fmt.Errorf("member %s reads %v, this worker %v: the workers of one job must read the same topics", mem.MemberID, meta.Topics, b.topics)
		}
		mb.ids[i], mb.owned[i] = mem.MemberID, meta.Tasks
	}
	return mb, topics, nil
}

type memberBalancer struct {
	b     *balancer
	ids   []string
	owned [][]int
}

func (mb *memberBalancer) Balance(map[string]int32) kgo.IntoSyncAssignment {
	panic("weir: Balance is not called on a GroupMemberBalancerOrError")
}

func (mb *memberBalancer) BalanceOrError(topics map[string]int32) (kgo.IntoSyncAssignment, error) {
	n := mb.b.partitions
	if n <= 0 {
		return nil, fmt.Errorf("the job's partition count is not known (topics' metadata %v)", topics)
	}
	// A failed balance makes franz-go drop every task of the leader: retry
	// storage errors for a while first.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var epoch int64
	var err error
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 2*time.Second) {
		if epoch, err = mb.b.newEpoch(ctx); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("allocate the fencing epoch of this generation: %w", err)
		case <-time.After(backoff):
		}
	}
	plan := planTasks(mb.owned, int(n))
	out := make(syncAssignment, len(mb.ids))
	for i, id := range mb.ids {
		tasks := plan[i]
		if tasks == nil {
			tasks = []int{}
		}
		raw, _ := json.Marshal(memberAssignment{Version: 1, Epoch: epoch, Tasks: tasks})
		out[i] = kmsg.SyncGroupRequestGroupAssignment{MemberID: id, MemberAssignment: raw}
	}
	return out, nil
}

type syncAssignment []kmsg.SyncGroupRequestGroupAssignment

func (s syncAssignment) IntoSyncAssignment() []kmsg.SyncGroupRequestGroupAssignment { return s }
