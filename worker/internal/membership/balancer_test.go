package membership

import (
	"context"
	"testing"
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
