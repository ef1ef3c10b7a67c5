package membership

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ProtocolName names the balancer in JoinGroup; all workers of a job must
// speak it.
const ProtocolName = "weir-tasks-v1"

// Meta is what a worker tells the group when it joins (JoinGroup
// metadata). It must not change between joins unless something changed:
// the coordinator compares it to decide whether a join means a rebalance.
type Meta struct {
	Version int `json:"v"`
	// Tasks are the tasks the worker runs now.
	Tasks []int `json:"tasks"`
	// Topics are the worker's input topics.
	Topics []string `json:"topics"`
	// Host and HTTP say where the worker's status page is.
	Host string `json:"host,omitempty"`
	HTTP string `json:"http,omitempty"`
	// Storage is the identity of the worker's checkpoint storage
	// (checkpoint.StorageID); empty from a worker that does not tell.
	Storage string `json:"storage,omitempty"`
}

// Assignment is what the leader tells each worker (SyncGroup).
type Assignment struct {
	Version int `json:"v"`
	// Epoch is the fencing epoch of the tasks this round gives the worker.
	Epoch int64 `json:"epoch"`
	Tasks []int `json:"tasks"`
}

// Balancer is the workers' kgo.GroupBalancer. The leader's MemberBalancer
// plans the round (Plan) and allocates the fencing epoch of the tasks it hands
// out; every member learns its tasks and that epoch in ParseSyncAssignment,
// which franz-go calls before OnPartitionsAssigned.
type Balancer struct {
	Topics []string // input topics; franz-go tracks Topics[0]
	// Partitions is the job's recorded partition count (its layout
	// record), the number of tasks: the balancer plans from it, not from
	// the metadata the group's leader sees, so that a partition added to
	// the input never becomes a task (the job stops on the change).
	Partitions int32
	// Meta says where the worker's status page is (Host, HTTP); the
	// Balancer fills in the rest.
	Meta func() Meta
	// GivenUp, if set, tells the tasks to leave out of the join metadata.
	GivenUp func(task int) bool
	// NewEpoch allocates a fencing epoch (checkpoint.NextEpoch): larger
	// than every epoch before, across generations and a deleted group.
	NewEpoch func(context.Context) (int64, error)
	// Storage is the identity of the worker's checkpoint storage: a
	// leader refuses to plan for members that checkpoint elsewhere.
	Storage string
	// Refused, if set, hears why the leader refused to plan, when no
	// retry mends it.
	Refused func(error)

	mu    sync.Mutex
	epoch int64 // of the last assignment received
	// leftOut are the tasks the last join left out (GivenUp): the leader
	// saw them unowned.
	leftOut []int
}

var _ kgo.GroupBalancer = (*Balancer)(nil)

func (b *Balancer) ProtocolName() string { return ProtocolName }
func (b *Balancer) IsCooperative() bool  { return true }

func (b *Balancer) JoinGroupMetadata(_ []string, current map[string][]int32, _ int32) []byte {
	m := b.Meta()
	m.Version, m.Topics, m.Tasks, m.Storage = 1, b.Topics, []int{}, b.Storage
	var left []int
	for _, p := range current[b.Topics[0]] {
		if b.GivenUp == nil || !b.GivenUp(int(p)) {
			m.Tasks = append(m.Tasks, int(p))
		} else {
			left = append(left, int(p))
		}
	}
	slices.Sort(m.Tasks)
	b.mu.Lock()
	b.leftOut = left
	b.mu.Unlock()
	out, _ := json.Marshal(m) // plain data: cannot fail
	return out
}

// DecodeAssignment reads an assignment; one that is not ours (kfake hands
// a member without one an empty consumer-protocol assignment) is empty.
func DecodeAssignment(raw []byte) (Assignment, error) {
	var a Assignment
	if len(bytes.TrimSpace(raw)) == 0 || raw[0] != '{' {
		return a, nil
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		return a, fmt.Errorf("group assignment: %w", err)
	}
	return a, nil
}

func (b *Balancer) ParseSyncAssignment(raw []byte) (map[string][]int32, error) {
	a, err := DecodeAssignment(raw)
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
	return map[string][]int32{b.Topics[0]: ps}, nil
}

// LeftOutOfJoin reports whether the last join left task out of this
// member's tasks (GivenUp said so). An assignment that gives it to this
// member gave a task nobody claimed, which franz-go does not report as
// added: to franz-go the member owned it all along.
func (b *Balancer) LeftOutOfJoin(task int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Contains(b.leftOut, task)
}

// CurrentEpoch is the epoch of the last assignment: the epoch of the tasks
// OnPartitionsAssigned adds.
func (b *Balancer) CurrentEpoch() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.epoch
}

func (b *Balancer) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	mb := &memberBalancer{b: b, ids: make([]string, len(members)), owned: make([][]int, len(members))}
	topics := map[string]struct{}{}
	for _, t := range b.Topics {
		topics[t] = struct{}{}
	}
	for i, mem := range members {
		var meta Meta
		if err := json.Unmarshal(mem.ProtocolMetadata, &meta); err != nil {
			return nil, nil, fmt.Errorf("member %s: metadata: %w", mem.MemberID, err)
		}
		if !slices.Equal(meta.Topics, b.Topics) {
			return nil, nil, fmt.Errorf("member %s reads %v, this worker %v: the workers of one job must read the same topics", mem.MemberID, meta.Topics, b.Topics)
		}
		if meta.Storage != "" && b.Storage != "" && meta.Storage != b.Storage {
			// A task moved between them would find none of its
			// checkpoints and start over, its output again.
			err := fmt.Errorf("member %s (host %s) checkpoints to another storage than this worker (storage ids %s and %s): "+
				"the workers of one job must share one --checkpoints (S3, or a directory every worker mounts), "+
				"or a task that moves finds none of its checkpoints and starts over, writing its output again",
				mem.MemberID, meta.Host, meta.Storage, b.Storage)
			if b.Refused != nil {
				b.Refused(err)
			}
			return nil, nil, err
		}
		mb.ids[i], mb.owned[i] = mem.MemberID, meta.Tasks
	}
	return mb, topics, nil
}

type memberBalancer struct {
	b     *Balancer
	ids   []string
	owned [][]int
}

func (mb *memberBalancer) Balance(map[string]int32) kgo.IntoSyncAssignment {
	panic("weir: Balance is not called on a GroupMemberBalancerOrError")
}

func (mb *memberBalancer) BalanceOrError(topics map[string]int32) (kgo.IntoSyncAssignment, error) {
	n := mb.b.Partitions
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
		if epoch, err = mb.b.NewEpoch(ctx); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("allocate the fencing epoch of this generation: %w", err)
		case <-time.After(backoff):
		}
	}
	plan := Plan(mb.owned, int(n))
	out := make(syncAssignment, len(mb.ids))
	for i, id := range mb.ids {
		tasks := plan[i]
		if tasks == nil {
			tasks = []int{}
		}
		raw, _ := json.Marshal(Assignment{Version: 1, Epoch: epoch, Tasks: tasks})
		out[i] = kmsg.SyncGroupRequestGroupAssignment{MemberID: id, MemberAssignment: raw}
	}
	return out, nil
}

type syncAssignment []kmsg.SyncGroupRequestGroupAssignment

func (s syncAssignment) IntoSyncAssignment() []kmsg.SyncGroupRequestGroupAssignment { return s }
