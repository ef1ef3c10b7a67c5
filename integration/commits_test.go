package integration

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/testcluster"
)

// Issue 21, item 5: restore decides what became of a checkpoint's
// transactions from checkpoint storage's record of their commit first, and
// from the transaction coordinator only for the others. The coordinator
// forgets: it keeps no record of a transaction once its transactional id
// was re-initialised, nor once the id expired.

// TestWalkBackPastARecordedCommit: a worker restores checkpoint R and
// commits its transactions (they were committed already), completes empty
// checkpoints after it, which re-initialises R's transactional ids, and is
// killed; then a state file of each of those later checkpoints is lost. The
// next restore walks back to R, whose transactions the coordinator no
// longer knows as committed: the later manifests' record of the commit
// says they are, so R is restored and nothing is written twice. (Before
// issue 21 the coordinator's answer, lost, made restore walk back past R,
// and R's output was written again.)
func TestWalkBackPastARecordedCommit(t *testing.T) {
	c := testcluster.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	j := newCountJob(t, c, 1)
	// A long interval: the test acts between checkpoints.
	flags := []string{"--interval", "2s", "--state-backend", "pebble", "--txn-timeout", "60s"}
	out := startOutputReader(t, c, j.output, j.partitions)
	const keys = 50

	// Two batches of input, each committed by checkpoints of its own.
	a := j.run("A", "0", flags...)
	var total int64
	for _, n := range []int64{2000, 3000} {
		g := startGeneratorFrom(t, c, j.input, keys, total, n)
		total = g.Wait(ctx)
		if err := out.WaitFor(ctx, func(_, distinct int) bool { return int64(distinct) >= total }); err != nil {
			t.Fatal(err)
		}
	}
	// The output covers the input: the checkpoint that covers the last
	// record completed and committed. Kill A before the next one.
	a.Kill9()
	ms := j.manifests(ctx, 0)
	r := ms[len(ms)-1]
	if len(committablesOf(r)) == 0 || len(ms) < 2 {
		t.Fatalf("the newest checkpoint %d has no transactions (of %d checkpoints): the kill came too late", r.Checkpoint, len(ms))
	}
	t.Logf("A killed after checkpoint %d with transactions %v", r.Checkpoint, txnIDs(committablesOf(r)))

	// B restores R, commits (finds committed) its transactions, and
	// completes two empty checkpoints; the first re-initialises R's
	// transactional ids.
	b := j.run("B", "0", flags...)
	// Two completions: the first one's commit notification re-initialises
	// the restored transactional ids, and it comes before the second
	// checkpoint's barrier.
	from := 0
	for range 2 {
		i, _, err := b.WaitLine(ctx, from, isMsg(msgCheckpointComplete, 0))
		if err != nil {
			t.Fatal(err)
		}
		from = i + 1
	}
	b.Kill9()
	ms = j.manifests(ctx, 0)
	newest := ms[len(ms)-1]
	if n := len(committablesOf(newest)); n != 0 {
		t.Fatalf("checkpoint %d after the restore has %d transactions; want none (no new input)", newest.Checkpoint, n)
	}
	recorded := false
	for _, m := range ms {
		if m.Checkpoint > r.Checkpoint && containsAll(committedOf(m), committablesOf(r)) {
			recorded = true
		}
	}
	if !recorded {
		t.Fatalf("no checkpoint after %d records the commit of its transactions", r.Checkpoint)
	}
	adm := c.Admin(t)
	for _, cm := range committablesOf(r) {
		rec := describeTxn(ctx, t, adm, cm.TransactionalID)
		t.Logf("the coordinator now has %s at producer %d epoch %d (%s); checkpoint %d saved epoch %d",
			cm.TransactionalID, rec.Producer, rec.Epoch, rec.State, r.Checkpoint, cm.Epoch)
	}

	// Lose a state file of each checkpoint after R that R does not
	// reference. (They share R's SSTs, restored and not rewritten: without
	// new input there is no new SST. B's first snapshot is a base with its
	// store's MANIFEST among its files; the next, a delta without changes,
	// shares them.)
	inR := map[string]bool{}
	for _, f := range stateFiles(r) {
		inR[f.Name] = true
	}
	removed := map[string]bool{}
	for _, m := range ms {
		if m.Checkpoint <= r.Checkpoint {
			continue
		}
		lost := ""
		for _, f := range stateFiles(m) {
			if !inR[f.Name] && f.Size > 0 {
				lost = f.Name
				break
			}
		}
		if lost == "" {
			t.Fatalf("checkpoint %d has no state file that checkpoint %d does not have", m.Checkpoint, r.Checkpoint)
		}
		if !removed[lost] {
			if err := os.Remove(filepath.Join(j.checkpoints, filepath.FromSlash(lost))); err != nil {
				t.Fatal(err)
			}
			removed[lost] = true
		}
		t.Logf("deleted %s of checkpoint %d", lost, m.Checkpoint)
	}

	// C walks back to R and goes on; more input, then a drain.
	cw := j.run("C", "0", flags...)
	if _, line, err := cw.WaitLine(ctx, 0, isMsg(msgTaskRestored, 0)); err != nil {
		t.Fatal(err)
	} else if got := logInt(line, "from_checkpoint"); got != int64(r.Checkpoint) {
		t.Fatalf("C restored checkpoint %d, want %d (the newest whose state is whole): %s", got, r.Checkpoint, line)
	}
	g := startGeneratorFrom(t, c, j.input, keys, total, 1000)
	total = g.Wait(ctx)
	if err := out.WaitFor(ctx, func(_, distinct int) bool { return int64(distinct) >= total }); err != nil {
		t.Fatal(err)
	}
	if err, graceful := cw.Terminate(time.Minute); err != nil || !graceful {
		t.Fatalf("C on SIGTERM: %v (graceful %v)", err, graceful)
	}
	rep := j.finish(ctx, out, total)
	t.Logf("records in %d, records out %d, duplicates %d, missing %d", rep.In, rep.Out, rep.Duplicates, rep.Missing)
	assertExactlyOnce(t, rep)
}

// TestRestartAfterTheBrokerForgot: a drained job is restarted after the
// broker expired its transactional ids (on a broker of the test's own with
// a transactional.id.expiration.ms of seconds, not 7 days). The drain
// recorded its final checkpoint's commits in storage, so the restart
// restores it and the output stays exactly once. With that record gone,
// the transactions' markers in the output topic tell: the same. With the
// output's records deleted too, nothing tells whether the final
// checkpoint's output was committed: the restart refuses loudly, and
// writes nothing.
func TestRestartAfterTheBrokerForgot(t *testing.T) {
	if os.Getenv("KAFKA_BROKERS") == "" && os.Getenv("WEIR_OWN_BROKER_TESTS") != "1" {
		t.Skip("starts a broker of its own with a short transactional.id.expiration.ms (java, scripts/kafka): runs with " +
			"KAFKA_BROKERS set, as in the real-broker pass of .ci/run, or with WEIR_OWN_BROKER_TESTS=1")
	}
	// The expiration is seconds, yet longer than any slot of a running task
	// rests between its InitProducerID and its next transaction (9 slots
	// round robin at 500 ms, and the start of a loaded CI machine): a slot
	// the broker forgot while the task ran fails that task, which is not
	// what this test is about. At 2 s, a CI run saw it.
	c := testcluster.KafkaWith(t, map[string]string{
		"transactional.id.expiration.ms":                             "8000",
		"transaction.remove.expired.transaction.cleanup.interval.ms": "500",
	})
	for _, tc := range []struct {
		name                string
		keepRecord, keepLog bool
	}{
		{"commit record kept", true, true},
		{"commit record lost, the markers tell", false, true},
		{"commit record and output lost", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) { restartAfterExpiry(t, c, tc.keepRecord, tc.keepLog) })
	}
}

func restartAfterExpiry(t *testing.T, c *testcluster.Cluster, keepRecord, keepLog bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	j := newCountJob(t, c, 2)
	flags := []string{"--interval", "500ms"}
	out := startOutputReader(t, c, j.output, j.partitions)
	const keys = 40

	// A runs until the output covers the input while more input keeps
	// coming, then drains: the final checkpoint has transactions.
	a := j.run("A", "0,1", flags...)
	g := startGeneratorAt(t, c, j.input, keys, 0, -1, 2000)
	if err := out.WaitFor(ctx, func(_, distinct int) bool { return distinct >= 3000 }); err != nil {
		t.Fatal(err)
	}
	// Output shows right after a checkpoint commits: half an interval
	// later the next one has input to write, so the drain's final
	// checkpoint has transactions (a CI run drained 13 ms after a
	// checkpoint, with none).
	poll(ctx, t, 250*time.Millisecond)
	if err, graceful := a.Terminate(time.Minute); err != nil || !graceful {
		t.Fatalf("A on SIGTERM: %v (graceful %v)", err, graceful)
	}
	total := g.Stop()
	finals := map[int]checkpoint.Manifest{}
	st, err := checkpoint.NewFile(j.checkpoints)
	if err != nil {
		t.Fatal(err)
	}
	for task := range 2 {
		ms := j.manifests(ctx, task)
		finals[task] = ms[len(ms)-1]
		l, err := checkpoint.ListTask(ctx, st, j.name, task)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("task %d: final checkpoint %d with transactions %v; commit records %v", task, finals[task].Checkpoint,
			txnIDs(committablesOf(finals[task])), l.CommitRecords)
		if len(committablesOf(finals[task])) > 0 && len(l.CommitRecords) == 0 {
			t.Fatalf("task %d: the drain recorded no commit of its final checkpoint's transactions", task)
		}
		if !keepRecord {
			for _, name := range l.CommitRecords {
				if err := st.Delete(ctx, name); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if len(committablesOf(finals[0]))+len(committablesOf(finals[1])) == 0 {
		t.Fatal("no final checkpoint has transactions: the test would test nothing")
	}

	// Wait until the broker forgot every transactional id of the final
	// checkpoints.
	adm := c.Admin(t)
	deadline := time.Now().Add(time.Minute)
	for _, m := range finals {
		for _, cm := range committablesOf(m) {
			for describeTxn(ctx, t, adm, cm.TransactionalID).State != "NotFound" {
				if time.Now().After(deadline) {
					t.Fatalf("the broker still knows %s a minute after the drain", cm.TransactionalID)
				}
				poll(ctx, t, 250*time.Millisecond)
			}
		}
	}
	t.Logf("the broker forgot the final checkpoints' transactional ids")
	if !keepLog {
		// As retention would: the records the final checkpoints name are
		// gone from the output topic.
		ends, err := adm.ListEndOffsets(ctx, j.output)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := adm.DeleteRecords(ctx, ends.Offsets())
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			t.Fatalf("delete the output's records: %v", err)
		}
	}
	before, _ := out.Progress()

	b := j.run("B", "0,1", flags...)
	if !keepLog {
		_, line, err := b.WaitLine(ctx, 0, func(l string) bool {
			return strings.Contains(l, "neither the broker nor checkpoint storage keeps a record")
		})
		if err != nil {
			t.Fatalf("B did not refuse: %v", err)
		}
		t.Logf("B refused: %s", line)
		if err := b.ExitErr(time.Minute); err == nil {
			t.Fatal("B exited 0 after it refused to restore")
		}
		if after, _ := out.Progress(); after != before {
			t.Fatalf("the refusing worker wrote %d records", after-before)
		}
		rep := j.finish(ctx, out, total)
		if rep.Duplicates != 0 {
			t.Fatalf("%d duplicates", rep.Duplicates)
		}
		return
	}
	g = startGeneratorFrom(t, c, j.input, keys, total, 2000)
	total = g.Wait(ctx)
	if err := out.WaitFor(ctx, func(_, distinct int) bool { return int64(distinct) >= total }); err != nil {
		t.Fatal(err)
	}
	if err, graceful := b.Terminate(time.Minute); err != nil || !graceful {
		t.Fatalf("B on SIGTERM: %v (graceful %v)", err, graceful)
	}
	for task := range 2 {
		if _, line, err := b.WaitLine(ctx, 0, isMsg(msgTaskRestored, task)); err != nil {
			t.Fatal(err)
		} else if got := logInt(line, "from_checkpoint"); got != int64(finals[task].Checkpoint) {
			t.Fatalf("task %d restored checkpoint %d, want the final one, %d", task, got, finals[task].Checkpoint)
		}
	}
	rep := j.finish(ctx, out, total)
	t.Logf("records in %d, records out %d, duplicates %d, missing %d", rep.In, rep.Out, rep.Duplicates, rep.Missing)
	assertExactlyOnce(t, rep)
}

func committedOf(m checkpoint.Manifest) []checkpoint.Committable {
	var cs []checkpoint.Committable
	for _, a := range m.Operators {
		cs = append(cs, a.Committed...)
	}
	return cs
}

// containsAll reports whether have holds every transaction of want.
func containsAll(have, want []checkpoint.Committable) bool {
	for _, w := range want {
		if !slices.ContainsFunc(have, func(h checkpoint.Committable) bool {
			return h.TransactionalID == w.TransactionalID && h.ProducerID == w.ProducerID && h.Epoch == w.Epoch
		}) {
			return false
		}
	}
	return true
}

func txnIDs(cs []checkpoint.Committable) []string {
	var ids []string
	for _, c := range cs {
		ids = append(ids, c.TransactionalID)
	}
	return ids
}

func stateFiles(m checkpoint.Manifest) []checkpoint.FileRef {
	var fs []checkpoint.FileRef
	for _, a := range m.Operators {
		if a.State != nil {
			fs = append(fs, a.State.Files...)
		}
	}
	return fs
}
