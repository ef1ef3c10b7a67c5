package membership

import (
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestBalancerPlansFromTheRecordedCount: the group's leader sees the
// input's partitions in the metadata, but hands out only the tasks of the
// job's recorded count: a partition added while the job runs never becomes
// a task.
func TestBalancerPlansFromTheRecordedCount(t *testing.T) {
	b := &Balancer{Topics: []string{"in"}, Partitions: 4, NewEpoch: func(context.Context) (int64, error) { return 7, nil }}
	mb := &memberBalancer{b: b, ids: []string{"a", "b"}, owned: [][]int{nil, nil}}
	into, err := mb.BalanceOrError(map[string]int32{"in": 8})
	if err != nil {
		t.Fatal(err)
	}
	var all []int
	for _, a := range into.IntoSyncAssignment() {
		ma, err := DecodeAssignment(a.MemberAssignment)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, ma.Tasks...)
	}
	if len(all) != 4 {
		t.Fatalf("tasks handed out %v, want 0..3 of the recorded count 4", all)
	}
	for _, task := range all {
		if task >= 4 {
			t.Fatalf("task %d handed out: the job has 4", task)
		}
	}
	b.Partitions = 0
	if _, err := mb.BalanceOrError(map[string]int32{"in": 8}); err == nil {
		t.Error("planned without the job's count")
	}
}

// TestBalancerRefusesMembersOfAnotherStorage: workers of one job that
// checkpoint to different storage (each its own local directory, say) do
// not share checkpoints: a task moved between them would start over. The
// leader refuses to plan for them, and says so through Refused.
func TestBalancerRefusesMembersOfAnotherStorage(t *testing.T) {
	join := func(b *Balancer) kmsg.JoinGroupResponseMember {
		m := kmsg.NewJoinGroupResponseMember()
		m.MemberID = "m-" + b.Storage
		m.ProtocolMetadata = b.JoinGroupMetadata(nil, nil, 0)
		return m
	}
	meta := func() Meta { return Meta{Host: "h"} }
	var refused error
	leader := &Balancer{Topics: []string{"in"}, Partitions: 2, Meta: meta, Storage: "s1", Refused: func(err error) { refused = err }}
	same := &Balancer{Topics: []string{"in"}, Partitions: 2, Meta: meta, Storage: "s1"}
	other := &Balancer{Topics: []string{"in"}, Partitions: 2, Meta: meta, Storage: "s2"}
	older := &Balancer{Topics: []string{"in"}, Partitions: 2, Meta: meta} // tells none
	if _, _, err := leader.MemberBalancer([]kmsg.JoinGroupResponseMember{join(leader), join(same), join(older)}); err != nil || refused != nil {
		t.Fatalf("members of one storage: %v (refused %v)", err, refused)
	}
	_, _, err := leader.MemberBalancer([]kmsg.JoinGroupResponseMember{join(leader), join(other)})
	if err == nil || refused == nil || !strings.Contains(refused.Error(), "checkpoints to another storage than this worker (storage ids s2 and s1)") {
		t.Fatalf("a member of another storage: %v (refused %v)", err, refused)
	}
}
