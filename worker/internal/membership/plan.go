package membership

import (
	"cmp"
	"slices"
)

// Plan decides one round of a cooperative rebalance of n tasks over
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
func Plan(owned [][]int, n int) [][]int {
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
