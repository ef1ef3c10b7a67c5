package engine

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/weirstream/weir/checkpoint"
)

// TestWalkBackGolden runs the scripts in testdata/walkback: each states a
// task's manifests, what checkpoint storage recorded and what the sinks
// answer, and shows every question the walk asks and what it decides.
// Regenerate the expected output with
// `go test ./runtime -run TestWalkBackGolden -rewrite`, then read the diff:
// the goldens were checked by hand and are the specification.
//
// Commands:
//
//	manifest id=<n> epoch=<e>      a completed checkpoint; one line per
//	                               committable: <operator> <txn> [pid=<p>] [epoch=<e>]
//	                               (pid 1 and the manifest's epoch by default)
//	unusable id=<n>                its state cannot be restored; the input says why
//	recorded                       lines "committed <operator> <txn>" or "aborted
//	                               <operator> <txn>": checkpoint storage's records
//	sink                           lines "<txn> <outcome> [abort=<outcome>]": what
//	                               the sinks answer for a transaction when checked,
//	                               and after an abort (lost by default)
//	walk task=<t>                  runs the walk, answering its questions from the
//	                               sink lines, and prints them, its notes and its
//	                               decision
//
// A transaction the walk asks about that no sink line names fails the test:
// every question must be foreseen by the script.
func TestWalkBackGolden(t *testing.T) {
	datadriven.Walk(t, "testdata/walkback", func(t *testing.T, path string) {
		var (
			ms       []checkpoint.Manifest
			unusable = map[checkpoint.ID]error{}
			recorded = checkpoint.Recorded{Committed: map[checkpoint.TxnKey]bool{}, Aborted: map[checkpoint.TxnKey]bool{}}
			checks   = map[string]CommitOutcome{}
			aborts   = map[string]CommitOutcome{}
		)
		// the committables by operator/txn, so that recorded lines need
		// not repeat their producer ids and epochs.
		txns := map[string]checkpoint.Committable{}
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			switch td.Cmd {
			case "manifest":
				var id uint64
				var epoch int64
				td.ScanArgs(t, "id", &id)
				td.ScanArgs(t, "epoch", &epoch)
				m := checkpoint.Manifest{Job: "walk", Checkpoint: checkpoint.ID(id), Epoch: epoch}
				byOp := map[string]int{}
				for _, line := range lines(td.Input) {
					f := strings.Fields(line)
					if len(f) < 2 {
						td.Fatalf(t, "committable %q: want <operator> <txn> [pid=] [epoch=]", line)
					}
					c := checkpoint.Committable{Operator: f[0], TransactionalID: f[1], ProducerID: 1, Epoch: int16(epoch)}
					for _, kv := range f[2:] {
						k, v, _ := strings.Cut(kv, "=")
						n, err := strconv.ParseInt(v, 10, 64)
						if err != nil {
							td.Fatalf(t, "%s: %v", kv, err)
						}
						switch k {
						case "pid":
							c.ProducerID = n
						case "epoch":
							c.Epoch = int16(n)
						default:
							td.Fatalf(t, "unknown %q", kv)
						}
					}
					txns[c.Operator+"/"+c.TransactionalID] = c
					i, ok := byOp[c.Operator]
					if !ok {
						i = len(m.Operators)
						byOp[c.Operator] = i
						m.Operators = append(m.Operators, checkpoint.Ack{Operator: c.Operator})
					}
					m.Operators[i].Committables = append(m.Operators[i].Committables, c)
				}
				if n := len(ms); n > 0 && ms[n-1].Checkpoint >= m.Checkpoint {
					td.Fatalf(t, "manifests go in ascending order")
				}
				ms = append(ms, m)
				return ""
			case "unusable":
				var id uint64
				td.ScanArgs(t, "id", &id)
				unusable[checkpoint.ID(id)] = errors.New(strings.TrimSpace(td.Input))
				return ""
			case "recorded":
				for _, line := range lines(td.Input) {
					f := strings.Fields(line)
					if len(f) != 3 {
						td.Fatalf(t, "recorded %q: want committed|aborted <operator> <txn>", line)
					}
					c, ok := txns[f[1]+"/"+f[2]]
					if !ok {
						td.Fatalf(t, "recorded %q: no such committable in the manifests", line)
					}
					switch f[0] {
					case "committed":
						recorded.Committed[c.Key()] = true
					case "aborted":
						recorded.Aborted[c.Key()] = true
					default:
						td.Fatalf(t, "recorded %q", line)
					}
				}
				return ""
			case "sink":
				for _, line := range lines(td.Input) {
					f := strings.Fields(line)
					if len(f) < 2 {
						td.Fatalf(t, "sink %q: want <txn> <outcome> [abort=<outcome>]", line)
					}
					checks[f[0]] = parseOutcome(t, td, f[1])
					aborts[f[0]] = CommitLost
					for _, kv := range f[2:] {
						v, ok := strings.CutPrefix(kv, "abort=")
						if !ok {
							td.Fatalf(t, "unknown %q", kv)
						}
						aborts[f[0]] = parseOutcome(t, td, v)
					}
				}
				return ""
			case "walk":
				var task int
				td.ScanArgs(t, "task", &task)
				return walk(t, td, newWalkBack(task, ms, recorded, unusable), checks, aborts)
			default:
				td.Fatalf(t, "unknown command %q", td.Cmd)
				return ""
			}
		})
	})
}

func walk(t *testing.T, td *datadriven.TestData, w *walkBack, checks, aborts map[string]CommitOutcome) string {
	var out strings.Builder
	answer := func(verb string, cs []checkpoint.Committable, from map[string]CommitOutcome) []CommitOutcome {
		os := make([]CommitOutcome, len(cs))
		var said []string
		for i, c := range cs {
			o, ok := from[c.TransactionalID]
			if !ok {
				td.Fatalf(t, "the walk asks to %s %s, which no sink line answers", verb, c.TransactionalID)
			}
			os[i] = o
			said = append(said, fmt.Sprintf("%s/%s=%s", c.Operator, c.TransactionalID, o))
		}
		fmt.Fprintf(&out, "%s: %s\n", verb, strings.Join(said, " "))
		return os
	}
	for range 100 {
		step := w.next()
		switch {
		case step.check != nil:
			w.checkedAs(step.check, answer("check", step.check, checks))
			continue
		case step.abort != nil:
			w.abortedAs(step.abort, answer("abort", step.abort, aborts))
			continue
		}
		for _, n := range step.notes {
			kind := "warn"
			if n.err {
				kind = "error"
			}
			fmt.Fprintf(&out, "%s: checkpoint %d: %s", kind, n.checkpoint, n.msg)
			if n.detail != "" {
				fmt.Fprintf(&out, " (%s)", n.detail)
			}
			out.WriteString("\n")
		}
		switch {
		case step.err != nil:
			if !errors.Is(step.err, ErrNoValidCheckpoint) {
				out.WriteString("(not ErrNoValidCheckpoint) ")
			}
			fmt.Fprintf(&out, "fail: %v\n", step.err)
		case step.restore != nil:
			fmt.Fprintf(&out, "restore %d", step.restore.Checkpoint)
			var resume []string
			for _, c := range committables(*step.restore) {
				if !w.recorded.Knows(c) {
					resume = append(resume, c.Operator+"/"+c.TransactionalID)
				}
			}
			if len(resume) > 0 {
				fmt.Fprintf(&out, ", resuming %s", strings.Join(resume, " "))
			}
			out.WriteString("\n")
		case step.fresh:
			out.WriteString("fresh start\n")
		default:
			td.Fatalf(t, "a step with nothing set")
		}
		return out.String()
	}
	td.Fatalf(t, "the walk asked 100 questions without deciding")
	return ""
}

func parseOutcome(t *testing.T, td *datadriven.TestData, s string) CommitOutcome {
	for _, o := range []CommitOutcome{CommitResumable, CommitDone, CommitLost, CommitUnknown} {
		if o.String() == s {
			return o
		}
	}
	td.Fatalf(t, "unknown outcome %q (resumable, committed, lost, unknown)", s)
	return 0
}

func lines(s string) []string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}
