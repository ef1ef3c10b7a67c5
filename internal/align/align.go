package align

import (
	"fmt"
	"time"

	"github.com/weirstream/weir/checkpoint"
)

// Mode chooses between exactly-once (aligned) and at-least-once (unaligned,
// never blocking) checkpoints.
type Mode int

const (
	// ExactlyOnce blocks an input that delivered barrier n until barrier n has
	// arrived on every live input.
	ExactlyOnce Mode = iota
	// AtLeastOnce never blocks and snapshots on the last barrier n.
	AtLeastOnce
)

func (m Mode) String() string {
	switch m {
	case ExactlyOnce:
		return "exactly-once"
	case AtLeastOnce:
		return "at-least-once"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Aligner aligns checkpoint barriers across the inputs of one operator. See
// the package documentation for the rules and the duties of its driver.
type Aligner struct {
	mode  Mode
	ended []bool
	live  int // inputs not ended

	// newest is the newest checkpoint started (aligning, snapshotted or
	// aborted); valid once started is true. Barriers not newer than it are
	// stale, except the missing barriers of the alignment in progress.
	newest  checkpoint.ID
	started bool

	// The alignment in progress, if pending: since is the time of its first
	// barrier, arrived the inputs that delivered it, blocked those of them
	// the driver must not read (always empty in at-least-once mode).
	pending bool
	since   time.Time
	arrived []bool
	blocked []bool
}

// New returns an aligner for an operator with the given number of inputs
// (at least one), all of them live and readable.
func New(inputs int, mode Mode) *Aligner {
	if inputs < 1 {
		panic(fmt.Sprintf("align: %d inputs, need at least one", inputs))
	}
	if mode != ExactlyOnce && mode != AtLeastOnce {
		panic(fmt.Sprintf("align: unknown mode %v", mode))
	}
	return &Aligner{
		mode:    mode,
		ended:   make([]bool, inputs),
		live:    inputs,
		arrived: make([]bool, inputs),
		blocked: make([]bool, inputs),
	}
}

// Barrier reports that barrier id was read from input at time now.
func (a *Aligner) Barrier(input int, id checkpoint.ID, now time.Time) []Action {
	a.mustRead(input, "barrier")
	if a.ended[input] {
		panic(fmt.Sprintf("align: barrier %d on input %d, which ended", id, input))
	}
	if a.started && (id < a.newest || id == a.newest && (!a.pending || a.arrived[input])) {
		return nil // stale or repeated
	}
	var acts []Action
	if a.pending && id > a.newest {
		acts = append(acts, Abort{
			ID:     a.newest,
			Reason: fmt.Sprintf("overtaken by barrier %d on input %d", id, input),
		})
		acts = a.stop(acts)
	}
	if !a.pending {
		a.pending, a.since = true, now
		a.newest, a.started = id, true
	}
	a.arrived[input] = true
	if a.aligned() {
		return a.snapshot(acts, now)
	}
	if a.mode == ExactlyOnce {
		a.blocked[input] = true
		acts = append(acts, Block{Input: input})
	}
	return acts
}

// End reports that input ended at time now: a bounded source finished or the
// upstream closed the channel. Ending an input twice is ignored.
func (a *Aligner) End(input int, now time.Time) []Action {
	a.mustRead(input, "end")
	if a.ended[input] {
		return nil
	}
	a.ended[input] = true
	a.live--
	var acts []Action
	if a.pending && a.aligned() {
		acts = a.snapshot(acts, now)
	}
	if a.live == 0 {
		acts = append(acts, EndOfInput{})
	}
	return acts
}

// Blocked reports whether the driver must not read input now.
func (a *Aligner) Blocked(input int) bool {
	a.mustExist(input)
	return a.blocked[input]
}

// Pending returns the checkpoint being aligned, if any.
func (a *Aligner) Pending() (checkpoint.ID, bool) {
	if !a.pending {
		return 0, false
	}
	return a.newest, true
}

// aligned reports whether every live input delivered the pending barrier.
func (a *Aligner) aligned() bool {
	for i, ok := range a.arrived {
		if !ok && !a.ended[i] {
			return false
		}
	}
	return true
}

// snapshot completes the pending alignment.
func (a *Aligner) snapshot(acts []Action, now time.Time) []Action {
	acts = append(acts, Snapshot{ID: a.newest, Alignment: max(now.Sub(a.since), 0)})
	return a.stop(acts)
}

// stop ends the pending alignment and releases the inputs it blocked.
func (a *Aligner) stop(acts []Action) []Action {
	var inputs []int
	for i, b := range a.blocked {
		if b {
			inputs = append(inputs, i)
		}
	}
	a.pending = false
	clear(a.arrived)
	clear(a.blocked)
	if len(inputs) > 0 {
		acts = append(acts, Unblock{Inputs: inputs})
	}
	return acts
}

func (a *Aligner) mustExist(input int) {
	if input < 0 || input >= len(a.ended) {
		panic(fmt.Sprintf("align: input %d out of range [0,%d)", input, len(a.ended)))
	}
}

// mustRead panics if the driver read input while it was blocked.
func (a *Aligner) mustRead(input int, what string) {
	a.mustExist(input)
	if a.blocked[input] {
		panic(fmt.Sprintf("align: %s read from input %d while it is blocked", what, input))
	}
}
