package align

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/weirstream/weir/checkpoint"
)

// The simulated driver below does what the runtime's multi-input operator
// goroutine must do (see doc.go), over in-memory queues instead of channels, so
// that the golden scripts and the randomised property test exercise the
// aligner the way the runtime will.

type itemKind int

const (
	recordItem itemKind = iota
	barrierItem
	endItem
)

// item is one element of an input channel.
type item struct {
	kind  itemKind
	label string        // records: a1, a2, … on input 0; b1, … on input 1
	value int           // records
	id    checkpoint.ID // barriers
}

func (it item) String() string {
	switch it.kind {
	case recordItem:
		return it.label
	case barrierItem:
		return fmt.Sprintf("|%d|", it.id)
	}
	return "end"
}

// opState is the operator's state: per input, how many records were applied
// and their sum, plus a combined sum over all inputs. Each input is read in
// order, so its count identifies exactly which records were applied.
type opState struct {
	count []int
	sum   []int
	total int
	// labels of the applied records, per input (golden output only).
	labels [][]string
}

func newOpState(inputs int) opState {
	return opState{count: make([]int, inputs), sum: make([]int, inputs), labels: make([][]string, inputs)}
}

func (s *opState) apply(input int, it item) {
	s.count[input]++
	s.sum[input] += it.value
	s.total += it.value
	s.labels[input] = append(s.labels[input], it.label)
}

func (s opState) clone() opState {
	c := opState{
		count: slices.Clone(s.count),
		sum:   slices.Clone(s.sum),
		total: s.total,
	}
	for _, l := range s.labels {
		c.labels = append(c.labels, slices.Clone(l))
	}
	return c
}

func (s opState) String() string {
	var b strings.Builder
	for i, l := range s.labels {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%d=[%s]", i, strings.Join(l, " "))
	}
	return b.String()
}

// driver is a simulated multi-input operator goroutine.
type driver struct {
	a       *Aligner
	mode    Mode
	start   time.Time
	now     time.Time
	queues  [][]item
	ended   []bool // the driver read the end of this input
	blocked []bool // as told by Block/Unblock actions
	sent    []int  // records enqueued per input, for labels

	state      opState
	snapshots  map[checkpoint.ID]opState
	order      []checkpoint.ID // snapshot ids in the order taken
	aborted    []checkpoint.ID
	downstream []item // what the operator forwarded
	endSent    int

	log func(format string, args ...any) // nil: quiet
}

func newDriver(inputs int, mode Mode) *driver {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return &driver{
		a:         New(inputs, mode),
		mode:      mode,
		start:     start,
		now:       start,
		queues:    make([][]item, inputs),
		ended:     make([]bool, inputs),
		blocked:   make([]bool, inputs),
		sent:      make([]int, inputs),
		state:     newOpState(inputs),
		snapshots: map[checkpoint.ID]opState{},
	}
}

func (d *driver) logf(format string, args ...any) {
	if d.log != nil {
		d.log(format, args...)
	}
}

// record makes the next record of input i.
func (d *driver) record(i, value int) item {
	d.sent[i]++
	return item{kind: recordItem, label: fmt.Sprintf("%c%d", 'a'+i, d.sent[i]), value: value}
}

// readable lists the inputs the driver may read now and that have something
// to read.
func (d *driver) readable() []int {
	var in []int
	for i, q := range d.queues {
		if len(q) > 0 && !d.blocked[i] && !d.ended[i] {
			in = append(in, i)
		}
	}
	return in
}

// read takes the next item of input i and handles it.
func (d *driver) read(i int) error {
	if d.a.Blocked(i) || d.blocked[i] {
		return fmt.Errorf("blocked! driver read input %d while it is blocked", i)
	}
	if d.ended[i] {
		return fmt.Errorf("driver read input %d after its end", i)
	}
	it := d.queues[i][0]
	d.queues[i] = d.queues[i][1:]
	switch it.kind {
	case recordItem:
		d.logf("read %d: %s", i, it)
		d.state.apply(i, it)
		d.downstream = append(d.downstream, it)
		return nil
	case barrierItem:
		d.logf("read %d: barrier %d", i, it.id)
		return d.apply(d.a.Barrier(i, it.id, d.now))
	default:
		d.logf("read %d: end", i)
		d.ended[i] = true
		return d.apply(d.a.End(i, d.now))
	}
}

// apply carries out the aligner's actions and checks them against its
// queries.
func (d *driver) apply(acts []Action) error {
	if len(acts) == 0 {
		d.logf("  (no action)")
	}
	for _, act := range acts {
		d.logf("  %s", act)
		switch act := act.(type) {
		case Block:
			if d.mode == AtLeastOnce {
				return fmt.Errorf("block in at-least-once mode")
			}
			d.blocked[act.Input] = true
		case Unblock:
			if len(act.Inputs) == 0 || !slices.IsSorted(act.Inputs) {
				return fmt.Errorf("unblock %v: want a non-empty increasing list", act.Inputs)
			}
			for _, i := range act.Inputs {
				if !d.blocked[i] {
					return fmt.Errorf("unblock of input %d, which was not blocked", i)
				}
				d.blocked[i] = false
			}
		case Snapshot:
			if _, dup := d.snapshots[act.ID]; dup {
				return fmt.Errorf("second snapshot %d", act.ID)
			}
			if n := len(d.order); n > 0 && d.order[n-1] >= act.ID {
				return fmt.Errorf("snapshot %d after snapshot %d", act.ID, d.order[n-1])
			}
			if act.Alignment < 0 {
				return fmt.Errorf("snapshot %d: negative alignment %s", act.ID, act.Alignment)
			}
			// Snapshot first, then forward one barrier.
			d.snapshots[act.ID] = d.state.clone()
			d.order = append(d.order, act.ID)
			d.logf("    state %s", d.state)
			d.logf("    forward barrier %d", act.ID)
			d.downstream = append(d.downstream, item{kind: barrierItem, id: act.ID})
		case Abort:
			d.aborted = append(d.aborted, act.ID)
		case EndOfInput:
			for i, e := range d.ended {
				if !e {
					return fmt.Errorf("end of input while input %d is live", i)
				}
			}
			d.endSent++
			if d.endSent > 1 {
				return fmt.Errorf("end of input returned twice")
			}
			d.downstream = append(d.downstream, item{kind: endItem})
		default:
			return fmt.Errorf("unknown action %T", act)
		}
	}
	// The actions and the queries must tell the same story.
	for i, b := range d.blocked {
		if d.a.Blocked(i) != b {
			return fmt.Errorf("input %d: Blocked()=%v but actions say %v", i, d.a.Blocked(i), b)
		}
	}
	_, pending := d.a.Pending()
	if pending && d.mode == ExactlyOnce && !slices.Contains(d.blocked, true) {
		return fmt.Errorf("exactly-once alignment pending with no input blocked")
	}
	if !pending && slices.Contains(d.blocked, true) {
		return fmt.Errorf("input blocked with no alignment pending")
	}
	return nil
}
