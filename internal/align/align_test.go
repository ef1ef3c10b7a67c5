package align

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// step is one event for an aligner and what Blocked and Pending must say after
// it.
type step struct {
	end     bool // End(input) instead of Barrier(input, id)
	input   int
	id      checkpoint.ID
	acts    string // the actions, joined by "; "
	blocked []int
	pending checkpoint.ID // 0: none
}

func TestBlockedPending(t *testing.T) {
	for _, tc := range []struct {
		name   string
		inputs int
		mode   Mode
		steps  []step
	}{
		{"exactly-once aligns and releases", 3, ExactlyOnce, []step{
			{input: 2, id: 1, acts: "block input 2", blocked: []int{2}, pending: 1},
			{input: 0, id: 1, acts: "block input 0", blocked: []int{0, 2}, pending: 1},
			{input: 1, id: 1, acts: "snapshot 1 (alignment 0s); unblock inputs [0 2]"},
		}},
		{"exactly-once overtaken", 2, ExactlyOnce, []step{
			{input: 0, id: 1, acts: "block input 0", blocked: []int{0}, pending: 1},
			{input: 1, id: 2, acts: "abort 1 (overtaken by barrier 2 on input 1); unblock inputs [0]; block input 1", blocked: []int{1}, pending: 2},
			{input: 0, id: 1, blocked: []int{1}, pending: 2}, // stale: ignored
			{input: 0, id: 2, acts: "snapshot 2 (alignment 0s); unblock inputs [1]"},
		}},
		{"exactly-once end completes", 2, ExactlyOnce, []step{
			{input: 1, id: 5, acts: "block input 1", blocked: []int{1}, pending: 5},
			{end: true, input: 0, acts: "snapshot 5 (alignment 0s); unblock inputs [1]"},
			{input: 1, id: 6, acts: "snapshot 6 (alignment 0s)"},
			{end: true, input: 1, acts: "end of input"},
		}},
		{"at-least-once never blocks", 2, AtLeastOnce, []step{
			{input: 0, id: 1, pending: 1},
			{input: 0, id: 1, pending: 1}, // repeated: ignored
			{input: 1, id: 1, acts: "snapshot 1 (alignment 0s)"},
			{input: 1, id: 2, pending: 2},
			{end: true, input: 1, pending: 2},
			{input: 0, id: 3, acts: "abort 2 (overtaken by barrier 3 on input 0); snapshot 3 (alignment 0s)"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := New(tc.inputs, tc.mode)
			for i, s := range tc.steps {
				var acts []Action
				if s.end {
					acts = a.End(s.input, t0)
				} else {
					acts = a.Barrier(s.input, s.id, t0)
				}
				if got := join(acts); got != s.acts {
					t.Errorf("step %d: actions %q, want %q", i, got, s.acts)
				}
				var blocked []int
				for in := range tc.inputs {
					if a.Blocked(in) {
						blocked = append(blocked, in)
					}
				}
				if !slices.Equal(blocked, s.blocked) {
					t.Errorf("step %d: blocked %v, want %v", i, blocked, s.blocked)
				}
				id, ok := a.Pending()
				if ok != (s.pending != 0) || id != s.pending {
					t.Errorf("step %d: Pending() = %d, %v; want %d", i, id, ok, s.pending)
				}
			}
		})
	}
}

func TestNewIsReadable(t *testing.T) {
	a := New(4, ExactlyOnce)
	for i := range 4 {
		if a.Blocked(i) {
			t.Errorf("input %d blocked before any barrier", i)
		}
	}
	if id, ok := a.Pending(); ok {
		t.Errorf("Pending() = %d, true before any barrier", id)
	}
}

func TestEndTwice(t *testing.T) {
	a := New(2, ExactlyOnce)
	if got := join(a.End(0, t0)); got != "" {
		t.Errorf("first end: %q, want no action", got)
	}
	if got := join(a.End(0, t0)); got != "" {
		t.Errorf("second end: %q, want it ignored", got)
	}
	if got := join(a.End(1, t0)); got != "end of input" {
		t.Errorf("last end: %q, want end of input", got)
	}
	if got := join(a.End(1, t0)); got != "" {
		t.Errorf("end after end of input: %q, want it ignored", got)
	}
}

func TestAlignmentTime(t *testing.T) {
	a := New(2, ExactlyOnce)
	a.Barrier(0, 1, t0)
	if got := join(a.Barrier(1, 1, t0.Add(30*time.Millisecond))); got != "snapshot 1 (alignment 30ms); unblock inputs [0]" {
		t.Errorf("got %q", got)
	}
	// A clock that went backwards does not make a negative duration.
	a.Barrier(0, 2, t0)
	if got := join(a.Barrier(1, 2, t0.Add(-time.Second))); got != "snapshot 2 (alignment 0s); unblock inputs [0]" {
		t.Errorf("got %q", got)
	}
}

func TestMisusePanics(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    func()
		want string
	}{
		{"no inputs", func() { New(0, ExactlyOnce) }, "0 inputs"},
		{"bad mode", func() { New(1, Mode(7)) }, "unknown mode"},
		{"input out of range", func() { New(2, ExactlyOnce).Barrier(2, 1, t0) }, "out of range"},
		{"blocked out of range", func() { New(2, ExactlyOnce).Blocked(-1) }, "out of range"},
		{"barrier from blocked input", func() {
			a := New(2, ExactlyOnce)
			a.Barrier(0, 1, t0)
			a.Barrier(0, 2, t0)
		}, "while it is blocked"},
		{"end from blocked input", func() {
			a := New(2, ExactlyOnce)
			a.Barrier(0, 1, t0)
			a.End(0, t0)
		}, "while it is blocked"},
		{"barrier after end", func() {
			a := New(2, ExactlyOnce)
			a.End(0, t0)
			a.Barrier(0, 1, t0)
		}, "which ended"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if msg, _ := r.(string); !strings.Contains(msg, tc.want) {
					t.Errorf("panic %v, want one containing %q", r, tc.want)
				}
			}()
			tc.f()
		})
	}
}

func join(acts []Action) string {
	var s []string
	for _, a := range acts {
		s = append(s, a.String())
	}
	return strings.Join(s, "; ")
}

// A driver feeds what it reads from each input and obeys the actions.
func ExampleAligner() {
	a := New(2, ExactlyOnce)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	fmt.Println(a.Barrier(0, 1, start)) // input 0 must not be read now
	fmt.Println(a.Blocked(0), a.Blocked(1))
	for _, act := range a.Barrier(1, 1, start.Add(20*time.Millisecond)) {
		switch act := act.(type) {
		case Snapshot:
			fmt.Println("snapshot state, then forward barrier", act.ID, "after", act.Alignment)
		case Unblock:
			fmt.Println("read again:", act.Inputs)
		}
	}
	// Output:
	// [block input 0]
	// true false
	// snapshot state, then forward barrier 1 after 20ms
	// read again: [0]
}
