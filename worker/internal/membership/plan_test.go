package membership

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestPlan(t *testing.T) {
	for _, tc := range []struct {
		name  string
		owned [][]int
		n     int
		want  [][]int
	}{
		{"first member takes all", [][]int{nil}, 4, [][]int{{0, 1, 2, 3}}},
		{"two fresh members split evenly", [][]int{nil, nil}, 4, [][]int{{0, 1}, {2, 3}}},
		// The owner keeps its share; the tasks that move go to nobody
		// in this round, to the newcomer in the next.
		{"a member joins: moving tasks are withheld", [][]int{{0, 1, 2, 3}, nil}, 4, [][]int{{0, 1}, nil}},
		{"the next round gives them out", [][]int{{0, 1}, nil}, 4, [][]int{{0, 1}, {2, 3}}},
		{"a member died: its tasks go at once", [][]int{{0, 1, 2, 3}}, 12, [][]int{{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}}},
		{"sticky across members", [][]int{{5, 7}, {1, 3}}, 8, [][]int{{0, 2, 5, 7}, {1, 3, 4, 6}}},
		{"the members that own more get the extra task", [][]int{{0, 1, 2}, {3, 4}}, 5, [][]int{{0, 1, 2}, {3, 4}}},
		{"a task two members claim stays with the first", [][]int{{0, 1}, {1, 2}}, 3, [][]int{{0, 1}, {2}}},
		{"tasks beyond n are dropped", [][]int{{0, 9}}, 2, [][]int{{0, 1}}},
		{"more members than tasks", [][]int{nil, nil, nil}, 2, [][]int{{0}, {1}, nil}},
		{"no tasks", [][]int{nil}, 0, [][]int{nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Plan(tc.owned, tc.n)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("Plan(%v, %d) = %v, want %v", tc.owned, tc.n, got, tc.want)
			}
		})
	}
}

// TestPlanConverges runs rebalances of random groups to their end:
// in every round no task runs twice and nobody gets more than its share;
// a member only loses tasks (never gets one another member still owns);
// within two rounds every task runs, spread evenly.
func TestPlanConverges(t *testing.T) {
	seed := uint64(20261203)
	rng := rand.New(rand.NewPCG(seed, seed))
	for iter := range 2000 {
		n, m := rng.IntN(20), 1+rng.IntN(6)
		owned := make([][]int, m)
		// Some tasks owned by nobody, some by two members, some past n.
		for task := range n + 2 {
			for range rng.IntN(3) {
				i := rng.IntN(m)
				owned[i] = append(owned[i], task)
			}
		}
		for round := 1; ; round++ {
			plan := Plan(owned, n)
			seen := map[int]bool{}
			for i, ts := range plan {
				if len(ts) > (n+m-1)/m {
					t.Fatalf("iter %d round %d: member %d gets %d of %d tasks over %d members", iter, round, i, len(ts), n, m)
				}
				for _, task := range ts {
					if seen[task] {
						t.Fatalf("iter %d round %d: task %d assigned twice: %v", iter, round, task, plan)
					}
					seen[task] = true
					// Given to i although another member owns it (the first
					// that lists it, when several do).
					if j := slices.IndexFunc(owned, func(o []int) bool { return slices.Contains(o, task) }); j >= 0 && j != i {
						t.Fatalf("iter %d round %d: task %d moves from member %d to %d in one round", iter, round, task, j, i)
					}
				}
			}
			if len(seen) == n {
				lo, hi := n, 0
				for _, ts := range plan {
					lo, hi = min(lo, len(ts)), max(hi, len(ts))
				}
				if hi-lo > 1 {
					t.Fatalf("iter %d: converged uneven: %v", iter, plan)
				}
				break
			}
			if round == 2 {
				t.Fatalf("iter %d: %d of %d tasks assigned after two rounds: %v (from %v)", iter, len(seen), n, plan, owned)
			}
			owned = plan
		}
	}
}
