package align

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/weirstream/weir/checkpoint"
)

// TestGolden runs the scripts in testdata/. Regenerate their expected output
// with `go test ./internal/align -run TestGolden -rewrite`, then read the diff:
// the goldens were checked by hand and are the specification.
//
// Commands:
//
//	new inputs=<n> mode=exactly-once|at-least-once
//	record input=<i> [n=<count>]   upstream sends records a1, a2, … (b…, c… for inputs 1, 2)
//	barrier input=<i> id=<n>       upstream sends barrier n
//	end input=<i>                  upstream ends input i
//	tick d=<duration>              the clock advances
//	pause                          the driver stops reading: sent items queue up
//	read input=<i>                 the paused driver reads one item from input i
//	                               ("blocked!" if the aligner forbids it)
//	resume                         the driver reads again
//	downstream                     what the operator forwarded so far
//
// Sent items go to the input's queue (its channel). After each command the
// simulated driver reads every readable queue, lowest input first, until none
// is readable; an item sent to a blocked input is shown waiting ("blocked!")
// and is read once the input is unblocked. Each output ends with the aligner's
// status: the pending checkpoint, the blocked inputs, and what waits in them.
func TestGolden(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var d *driver
		var paused bool
		var out strings.Builder
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			out.Reset()
			if td.Cmd != "new" && d == nil {
				td.Fatalf(t, "%s before new", td.Cmd)
			}
			var input int
			if td.HasArg("input") {
				td.ScanArgs(t, "input", &input)
				if input < 0 || input >= len(d.queues) {
					td.Fatalf(t, "input %d out of range", input)
				}
			}
			switch td.Cmd {
			case "new":
				var inputs int
				var mode string
				td.ScanArgs(t, "inputs", &inputs)
				td.ScanArgs(t, "mode", &mode)
				d, paused = newDriver(inputs, parseMode(t, td, mode)), false
				d.log = func(format string, args ...any) { fmt.Fprintf(&out, format+"\n", args...) }
			case "record":
				n := 1
				td.MaybeScanArgs(t, "n", &n)
				for range n {
					d.send(input, d.record(input, 1))
				}
			case "barrier":
				var id uint64
				td.ScanArgs(t, "id", &id)
				d.send(input, item{kind: barrierItem, id: checkpoint.ID(id)})
			case "end":
				d.send(input, item{kind: endItem})
			case "tick":
				var s string
				td.ScanArgs(t, "d", &s)
				dur, err := time.ParseDuration(s)
				if err != nil {
					td.Fatalf(t, "tick: %v", err)
				}
				d.now = d.now.Add(dur)
				return fmt.Sprintf("t=%s\n", d.now.Sub(d.start))
			case "pause":
				paused = true
			case "resume":
				paused = false
			case "read":
				switch {
				case d.a.Blocked(input):
					fmt.Fprintf(&out, "blocked!: the driver must not read input %d\n", input)
				case d.ended[input] || len(d.queues[input]) == 0:
					fmt.Fprintf(&out, "nothing to read on input %d\n", input)
				default:
					if err := d.read(input); err != nil {
						fmt.Fprintf(&out, "error: %v\n", err)
					}
				}
			case "downstream":
				var items []string
				for _, it := range d.downstream {
					items = append(items, it.String())
				}
				return strings.Join(items, " ") + "\n"
			default:
				td.Fatalf(t, "unknown command %q", td.Cmd)
			}
			if !paused {
				if err := d.drain(); err != nil {
					fmt.Fprintf(&out, "error: %v\n", err)
				}
			}
			out.WriteString(d.status())
			return out.String()
		})
	})
}

func parseMode(t *testing.T, td *datadriven.TestData, s string) Mode {
	for _, m := range []Mode{ExactlyOnce, AtLeastOnce} {
		if m.String() == s {
			return m
		}
	}
	td.Fatalf(t, "unknown mode %q", s)
	return 0
}

// send puts it on input i's queue, saying so if it has to wait there.
func (d *driver) send(i int, it item) {
	if d.ended[i] || slices.ContainsFunc(d.queues[i], func(q item) bool { return q.kind == endItem }) {
		d.logf("error: send %s on input %d after its end", it, i)
		return
	}
	d.queues[i] = append(d.queues[i], it)
	if d.blocked[i] {
		d.logf("input %d blocked!: %s waits", i, it)
	}
	// Otherwise it is read by the next drain, unless the driver is paused.
}

// drain reads readable inputs, lowest first, until none is readable.
func (d *driver) drain() error {
	for {
		in := d.readable()
		if len(in) == 0 {
			return nil
		}
		if err := d.read(in[0]); err != nil {
			return err
		}
	}
}

func (d *driver) status() string {
	var b strings.Builder
	b.WriteString("> pending=")
	if id, ok := d.a.Pending(); ok {
		fmt.Fprintf(&b, "%d", id)
	} else {
		b.WriteString("none")
	}
	var blocked, ended []int
	for i := range d.queues {
		if d.a.Blocked(i) {
			blocked = append(blocked, i)
		}
		if d.ended[i] {
			ended = append(ended, i)
		}
	}
	fmt.Fprintf(&b, " blocked=%v", fmtInts(blocked))
	for i, q := range d.queues {
		if len(q) > 0 {
			var s []string
			for _, it := range q {
				s = append(s, it.String())
			}
			fmt.Fprintf(&b, " waiting%d=[%s]", i, strings.Join(s, " "))
		}
	}
	if len(ended) > 0 {
		fmt.Fprintf(&b, " ended=%v", fmtInts(ended))
	}
	b.WriteString("\n")
	return b.String()
}

func fmtInts(v []int) string {
	if v == nil {
		return "[]"
	}
	return fmt.Sprint(v)
}
