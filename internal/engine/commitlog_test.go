package engine

import (
	"slices"
	"strings"
	"testing"

	"github.com/weirstream/weir/checkpoint"
)

// TestCommitLog runs scripted sequences of barriers and completions
// through a sink's commit log. Each step is "b<id> <pending...>" (the
// barrier of id, with what PreCommit returned) or "c<id>" (Commit(id)
// returned), or "r <txns...>" (recovery committed them); after a barrier
// the log must report exactly the transactions listed after "=>".
func TestCommitLog(t *testing.T) {
	tests := []struct {
		name  string
		steps []string
		// final: what a commit record would list at the end.
		final string
	}{
		{name: "committed once, reported once, recorded",
			steps: []string{"b1 a => ", "c1", "b2 b => a", "c2", "b3 => b", "c3", "b4 => "}, final: ""},
		{name: "an aborted checkpoint's report is made again",
			steps: []string{"b1 a => ", "c1", "b2 => a", "b3 b => a", "c3", "b4 => b"}, final: "b"},
		{name: "pre-committed at an aborted barrier, committed with the next",
			steps: []string{"b1 a => ", "b2 a b => ", "c2", "b3 => a b", "c3", "b4 => "}, final: ""},
		// The barrier of 2 reaches a multi-input root before the completion
		// of 1 (mail and channel race): a stays pending in 2, is committed
		// by c1, reported from 3 on, recorded when 3 completes.
		{name: "barrier before the completion of the previous checkpoint",
			steps: []string{"b1 a => ", "b2 a b => ", "c1", "c2", "b3 => a b", "c3", "b4 => "}, final: ""},
		{name: "completion of an earlier checkpoint does not record a later report",
			steps: []string{"b1 a => ", "b2 a => ", "c1", "b3 => a", "c2", "b4 => a", "c4", "b5 => "}, final: ""},
		{name: "recovery's commits are reported until recorded",
			steps: []string{"r x y", "b1 => x y", "b2 a => x y", "c2", "b3 => a"}, final: "a"},
		{name: "the final checkpoint's commits go to the commit record",
			steps: []string{"b1 a => ", "c1", "b2 b => a", "c2"}, final: "b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l commitLog
			for _, step := range tt.steps {
				op, rest, _ := strings.Cut(step, " ")
				args, want, _ := strings.Cut(rest, "=>")
				switch {
				case op == "r":
					l.restored(txnsOf(strings.Fields(args)))
				case op[0] == 'b':
					got := names(l.barrier(idOf(t, op), txnsOf(strings.Fields(args))))
					if w := strings.Fields(want); !slices.Equal(got, w) {
						t.Fatalf("%s: reported %v, want %v", step, got, w)
					}
				case op[0] == 'c':
					l.completed(idOf(t, op))
				default:
					t.Fatalf("bad step %q", step)
				}
			}
			if got, want := names(l.pending()), strings.Fields(tt.final); !slices.Equal(got, want) {
				t.Fatalf("at the end %v unrecorded, want %v", got, want)
			}
		})
	}
}

func idOf(t *testing.T, op string) checkpoint.ID {
	t.Helper()
	var id checkpoint.ID
	for _, r := range op[1:] {
		if r < '0' || r > '9' {
			t.Fatalf("bad step %q", op)
		}
		id = 10*id + checkpoint.ID(r-'0')
	}
	return id
}

func names(cs []checkpoint.Committable) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, c.TransactionalID)
	}
	slices.Sort(out)
	return out
}
