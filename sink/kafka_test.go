package sink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/internal/testcluster"
)

// These tests run on kfake by default and on the broker named by
// KAFKA_BROKERS (for instance from scripts/kafka start). They log what the
// transaction coordinator answered, to compare the two.

type env struct {
	t       *testing.T
	cluster *testcluster.Cluster
	admin   *kadm.Client
	plain   *kgo.Client
	topic   string
	prefix  string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	c := testcluster.Kafka(t)
	e := &env{
		t:       t,
		cluster: c,
		plain:   c.Client(t),
		topic:   testcluster.UniqueName(t, "out"),
		prefix:  testcluster.UniqueName(t, "txn"),
	}
	e.admin = kadm.NewClient(e.plain)
	c.CreateTopics(t, 1, e.topic)
	if tv, err := transactionVersion(ctx(t), e.plain); err == nil {
		t.Logf("broker transaction.version: %d", tv)
	}
	return e
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

func (e *env) config() Config[string] {
	return Config[string]{
		Brokers:               e.cluster.Brokers,
		Topic:                 e.topic,
		Encode:                func(s string) (*kgo.Record, error) { return kgo.StringRecord(s), nil },
		TransactionalIDPrefix: e.prefix,
		TransactionTimeout:    time.Minute,
	}
}

func (e *env) open(cfg Config[string], restored []checkpoint.Committable) (engine.SinkWriter[string], error) {
	e.t.Helper()
	f, err := Kafka(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	info := engine.TaskInfo{Job: "job", Task: 0, Operator: "out", Logger: slog.New(slog.NewTextHandler(testWriter{e.t}, nil))}
	return f.Open(ctx(e.t), info, restored)
}

func (e *env) mustOpen(cfg Config[string], restored []checkpoint.Committable) *txnWriter[string] {
	e.t.Helper()
	w, err := e.open(cfg, restored)
	if err != nil {
		e.t.Fatalf("open sink: %v", err)
	}
	e.t.Cleanup(func() { _ = w.Close() })
	return w.(*txnWriter[string])
}

// openDelivery opens cfg's writer with delivery d, closed at the test's
// end; one that is not exactly-once drops cfg's transactional settings.
func (e *env) openDelivery(cfg Config[string], d Delivery) engine.SinkWriter[string] {
	e.t.Helper()
	if d != ExactlyOnce {
		cfg.Delivery, cfg.TransactionalIDPrefix, cfg.TransactionTimeout = d, "", 0
	}
	w, err := e.open(cfg, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = w.Close() })
	return w
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func write(t *testing.T, w engine.SinkWriter[string], vs ...string) {
	t.Helper()
	for _, v := range vs {
		if err := w.Write(ctx(t), v); err != nil {
			t.Fatalf("write %s: %v", v, err)
		}
	}
}

func preCommit(t *testing.T, w engine.SinkWriter[string], id checkpoint.ID) []checkpoint.Committable {
	t.Helper()
	cs, err := w.PreCommit(ctx(t), id)
	if err != nil {
		t.Fatalf("pre-commit %d: %v", id, err)
	}
	return cs
}

func commit(t *testing.T, w engine.SinkWriter[string], id checkpoint.ID) {
	t.Helper()
	if err := w.Commit(ctx(t), id); err != nil {
		t.Fatalf("commit %d: %v", id, err)
	}
}

// crash drops a writer as a killed process would: no transaction ends.
func crash(w *txnWriter[string]) { w.closeClients() }

// stable is the topic's last stable offset: read_committed readers see
// nothing at or past it.
func (e *env) stable() int64 {
	e.t.Helper()
	offs, err := e.admin.ListCommittedOffsets(ctx(e.t), e.topic)
	if err != nil {
		e.t.Fatal(err)
	}
	o, _ := offs.Lookup(e.topic, 0)
	if o.Err != nil {
		e.t.Fatal(o.Err)
	}
	return o.Offset
}

// committed reads everything a read_committed reader sees, up to a sentinel
// it writes first (outside any transaction). Every transaction on the topic
// must have ended, or the sentinel never becomes visible.
func (e *env) committed() []string {
	e.t.Helper()
	return consumeCommitted(e.t, e.cluster, e.topic, 0)
}

func (e *env) wantCommitted(want ...string) {
	e.t.Helper()
	got := e.committed()
	if !slices.Equal(got, want) {
		e.t.Fatalf("read_committed sees %q, want %q", got, want)
	}
}

func (e *env) describe(txnID string) string {
	state, pid, epoch, err := describe(ctx(e.t), e.plain, txnID)
	if err != nil {
		e.t.Fatal(err)
	}
	return fmt.Sprintf("%s pid=%d epoch=%d", state, pid, epoch)
}

// eventually polls cond until it holds: for what Kafka gives no event for
// (markers written, a timed-out transaction aborted).
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", timeout, what)
		}
		<-tick.C
	}
}

func TestExactlyOnceVisibleOnlyAfterCommit(t *testing.T) {
	e := newEnv(t)
	w := e.mustOpen(e.config(), nil)

	if cs := preCommit(t, w, 1); len(cs) != 0 {
		t.Fatalf("an empty interval pre-committed %v, want no committable", cs)
	}
	write(t, w, "a", "b")
	cs := preCommit(t, w, 2)
	if len(cs) != 1 || cs[0].TransactionalID != e.prefix+"-0-0" || cs[0].Operator != "out" {
		t.Fatalf("committables = %+v, want one of %s-0-0", cs, e.prefix)
	}
	t.Logf("pre-committed %+v; coordinator: %s", cs[0], e.describe(cs[0].TransactionalID))
	if got := e.stable(); got != 0 {
		t.Fatalf("last stable offset %d before the commit, want 0 (nothing visible)", got)
	}
	commit(t, w, 2)
	t.Logf("after commit: %s", e.describe(cs[0].TransactionalID))
	eventually(t, 30*time.Second, "commit markers not written", func() bool { return e.stable() >= 2 })
	e.wantCommitted("a", "b")

	write(t, w, "c")
	cs = preCommit(t, w, 3)
	if len(cs) != 1 || cs[0].TransactionalID != e.prefix+"-0-1" {
		t.Fatalf("checkpoint 3 committables = %+v, want one on slot 1", cs)
	}
	commit(t, w, 3)
	e.wantCommitted("a", "b", "c")

	// Close aborts the open transaction (no checkpoint names it) instead
	// of leaving it to hold back read_committed readers until it times out.
	write(t, w, "d")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	e.wantCommitted("a", "b", "c")
}

// Pre-commit, crash, restore: the new factory commits the restored
// transaction exactly once, aborts what was written after the barrier, and
// does so again (idempotently) when it crashes before its first checkpoint.
func TestExactlyOnceRecovery(t *testing.T) {
	e := newEnv(t)
	w1 := e.mustOpen(e.config(), nil)
	write(t, w1, "a", "b")
	cs := preCommit(t, w1, 1)
	write(t, w1, "after-barrier") // open transaction, no checkpoint names it
	t.Logf("pre-committed %+v; coordinator: %s", cs, e.describe(cs[0].TransactionalID))
	crash(w1)

	w2 := e.mustOpen(e.config(), cs)
	t.Logf("after recovery: %s (slot 1: %s)", e.describe(cs[0].TransactionalID), e.describe(e.prefix+"-0-1"))
	e.wantCommitted("a", "b")
	if st := w2.pool.slots[0].state; st != slotRestored {
		t.Fatalf("slot 0 after recovery: %v, want restored (not re-initialised before a checkpoint completes)", st)
	}
	crash(w2) // fails before its first checkpoint

	w3 := e.mustOpen(e.config(), cs)
	t.Logf("after second recovery: %s", e.describe(cs[0].TransactionalID))
	e.wantCommitted("a", "b")

	write(t, w3, "c")
	cs3 := preCommit(t, w3, 2)
	if len(cs3) != 1 || cs3[0].TransactionalID == cs[0].TransactionalID {
		t.Fatalf("checkpoint 2 committables %+v: want one, not on the restored slot", cs3)
	}
	commit(t, w3, 2)
	if st := w3.pool.slots[0].state; st != slotFree {
		t.Fatalf("restored slot after the first completed checkpoint: %v, want free", st)
	}
	t.Logf("restored slot re-initialised: %s", e.describe(cs[0].TransactionalID))
	e.wantCommitted("a", "b", "c")

	// The restored manifest's committables are spent now; its successor's
	// are what a restore uses. A restore from the old one finds them gone.
	if err := Validate(ctx(t), e.plain, cs); err == nil {
		t.Log("note: the re-initialised slot's committable still validates (broker kept it decidable)")
	} else {
		t.Logf("old manifest after re-initialisation: %v", err)
	}
	if err := Validate(ctx(t), e.plain, cs3); err != nil {
		t.Fatalf("committed committable of checkpoint 2: %v", err)
	}
}

func TestExactlyOnceCommittedRecognised(t *testing.T) {
	e := newEnv(t)
	w := e.mustOpen(e.config(), nil)
	write(t, w, "a")
	cs := preCommit(t, w, 1)
	commit(t, w, 1)
	sts, err := Check(ctx(t), e.plain, cs)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("committed by its owner: %+v", sts[0])
	if sts[0].Outcome != engine.CommitDone {
		t.Fatalf("outcome %v, want committed", sts[0].Outcome)
	}
	crash(w)
	w2 := e.mustOpen(e.config(), cs) // recovery finds it done
	_ = w2
	e.wantCommitted("a")
}

// A transaction fenced by a newer InitProducerID of its id is lost; so is a
// zombie's: its commits and writes fail once a new owner initialised the
// slots.
func TestExactlyOnceZombieFenced(t *testing.T) {
	e := newEnv(t)
	zombie := e.mustOpen(e.config(), nil)
	write(t, zombie, "a")
	cs1 := preCommit(t, zombie, 1) // slot 0; manifest 1 is durable
	write(t, zombie, "b")
	cs2 := preCommit(t, zombie, 2) // slot 1; manifest 2 is never written
	if len(cs2) != 2 {
		t.Fatalf("checkpoint 2 committables %+v, want checkpoint 1's and 2's", cs2)
	}
	before := e.describe(cs2[1].TransactionalID)

	owner := e.mustOpen(e.config(), cs1) // restores checkpoint 1
	t.Logf("slot 1 before the new owner: %s; after: %s", before, e.describe(cs2[1].TransactionalID))

	err := Validate(ctx(t), e.plain, cs2[1:])
	var lost *LostError
	if !errors.As(err, &lost) {
		t.Fatalf("Validate of the fenced transaction: %v, want *LostError", err)
	}
	t.Logf("fenced: %v", err)
	if lost.TransactionalID != cs2[1].TransactionalID || lost.Epoch != cs2[1].Epoch {
		t.Fatalf("LostError %+v does not name %+v", lost, cs2[1])
	}

	err = zombie.Commit(ctx(t), 2)
	t.Logf("zombie commit: %v", err)
	if err == nil {
		t.Fatal("the zombie committed checkpoint 2 after a new owner initialised the slots")
	}
	werr := zombie.Write(ctx(t), "c")
	if werr == nil {
		_, werr = zombie.PreCommit(ctx(t), 3)
	}
	t.Logf("zombie write: %v", werr)
	if werr == nil {
		t.Fatal("the zombie wrote and pre-committed after a new owner initialised the slots")
	}
	_ = zombie.Close()

	write(t, owner, "b2")
	preCommit(t, owner, 2)
	commit(t, owner, 2)
	e.wantCommitted("a", "b2")

	// Recovery from the zombie's checkpoint 2 is refused.
	_, err = e.open(e.config(), cs2)
	if !errors.As(err, &lost) {
		t.Fatalf("open with a fenced committable: %v, want *LostError", err)
	}
	var marker interface{ InvalidatesCheckpoint() bool }
	if !errors.As(err, &marker) || !marker.InvalidatesCheckpoint() {
		t.Fatalf("%v: not recognisable as an invalid checkpoint without importing sink", err)
	}
}

func TestExactlyOnceLostByTransactionTimeout(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.TransactionTimeout = time.Second
	w := e.mustOpen(cfg, nil)
	write(t, w, "a")
	cs := preCommit(t, w, 1)
	start := time.Now()
	var err error
	// The broker aborts timed-out transactions on a periodic scan.
	eventually(t, 90*time.Second, "the broker did not abort the timed-out transaction", func() bool {
		err = Validate(ctx(t), e.plain, cs)
		return err != nil
	})
	t.Logf("after %v: %s; %v", time.Since(start).Round(100*time.Millisecond), e.describe(cs[0].TransactionalID), err)
	var lost *LostError
	if !errors.As(err, &lost) {
		t.Fatalf("Validate: %v, want *LostError", err)
	}
	err = w.Commit(ctx(t), 1)
	t.Logf("owner commit after the timeout: %v", err)
	if err == nil {
		t.Fatal("commit of a timed-out transaction succeeded")
	}
	crash(w)
	if _, err := e.open(cfg, cs); !errors.As(err, &lost) {
		t.Fatalf("recovery with a timed-out committable: %v, want *LostError", err)
	}
	e.wantCommitted()
}

// A failed checkpoint's transaction stays pending, goes with the next
// PreCommit, and commits with the next completed checkpoint.
func TestExactlyOnceAbortedCheckpointCarriesOver(t *testing.T) {
	e := newEnv(t)
	w := e.mustOpen(e.config(), nil)
	write(t, w, "a")
	cs1 := preCommit(t, w, 1) // checkpoint 1 then fails: no Commit(1)
	write(t, w, "b")
	cs2 := preCommit(t, w, 2)
	if len(cs2) != 2 || cs2[0].TransactionalID != cs1[0].TransactionalID || cs2[0].Epoch != cs1[0].Epoch {
		t.Fatalf("checkpoint 2 committables %+v, want checkpoint 1's %+v first", cs2, cs1)
	}
	commit(t, w, 2)
	e.wantCommitted("a", "b")
	if cs3 := preCommit(t, w, 3); len(cs3) != 0 {
		t.Fatalf("committed transactions listed again: %+v", cs3)
	}
}

// Slots rotate; one whose transaction the newest manifest names is not
// reused, and a pool held by failing checkpoints fails the task clearly.
func TestExactlyOnceSlotReuse(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.PoolSize = 3
	w := e.mustOpen(cfg, nil)
	var used []string
	step := func(id checkpoint.ID, v string, complete bool) {
		t.Helper()
		write(t, w, v)
		cs := preCommit(t, w, id)
		used = append(used, strings.TrimPrefix(cs[len(cs)-1].TransactionalID, e.prefix+"-"))
		if complete {
			commit(t, w, id)
		}
	}
	for id := checkpoint.ID(1); id <= 4; id++ {
		step(id, fmt.Sprint(id), true)
	}
	// Slot 0 (checkpoint 1) is reused at checkpoint 4 only: checkpoint 2's
	// completion made manifest 1 superseded.
	if want := []string{"0-0", "0-1", "0-2", "0-0"}; !slices.Equal(used, want) {
		t.Fatalf("slots used %v, want %v", used, want)
	}
	// Checkpoints 5 and 6 fail: with one slot held by manifest 4 and two
	// pending, a pool of 3 has none for the next transaction (PoolSizeFor
	// wants 5 for one tolerated failure).
	step(5, "5", false)
	step(6, "6", false)
	err := w.Write(ctx(t), "7")
	if !errors.Is(err, ErrNoFreeSlot) {
		t.Fatalf("write with every slot held: %v, want ErrNoFreeSlot", err)
	}
	t.Logf("no free slot: %v", err)
	commit(t, w, 6)
	step(7, "7", true)
	e.wantCommitted("1", "2", "3", "4", "5", "6", "7")
}

// A pool of PoolSizeFor(f) survives the worst sequences of tolerated
// failures on a real coordinator, right after a restore whose manifest names
// f+1 transactions: f failures, a completion, f failures, a completion,
// with records written between every barrier and its outcome. Every record
// commits once.
func TestExactlyOnceSurvivesToleratedFailures(t *testing.T) {
	const f = 2
	e := newEnv(t)
	cfg := e.config()
	cfg.PoolSize = PoolSizeFor(f)
	var want []string
	id := checkpoint.ID(0)
	step := func(w *txnWriter[string], complete bool) []checkpoint.Committable {
		t.Helper()
		id++
		v := fmt.Sprint(id)
		want = append(want, v)
		write(t, w, v)
		cs := preCommit(t, w, id)
		write(t, w, v+"+") // between the barrier and its outcome
		want = append(want, v+"+")
		if complete {
			commit(t, w, id)
		}
		return cs
	}
	w1 := e.mustOpen(cfg, nil)
	var cs []checkpoint.Committable
	for range f + 1 {
		cs = step(w1, false)
	}
	if len(cs) != f+1 {
		t.Fatalf("manifest of checkpoint %d names %d transactions, want %d", id, len(cs), f+1)
	}
	crash(w1)
	// The open transaction's records ("3+") die with w1: no manifest
	// names them.
	want = slices.DeleteFunc(want, func(v string) bool { return v == fmt.Sprint(id)+"+" })

	w2 := e.mustOpen(cfg, cs)
	for round := range 3 {
		for range f {
			step(w2, false)
		}
		step(w2, true)
		t.Logf("round %d: %s", round, w2.pool.describe())
	}
	step(w2, true)                     // commits the last open transaction's records
	if err := w2.Close(); err != nil { // aborts the open one, which holds readers back
		t.Fatal(err)
	}
	want = want[:len(want)-1]
	e.wantCommitted(want...)
}

func TestAtLeastOnceAndNone(t *testing.T) {
	for _, d := range []Delivery{AtLeastOnce, None} {
		t.Run(string(d), func(t *testing.T) {
			e := newEnv(t)
			cfg := e.config()
			cfg.Delivery, cfg.TransactionalIDPrefix, cfg.TransactionTimeout = d, "", 0
			w, err := e.open(cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			write(t, w, "a", "b")
			cs, err := w.PreCommit(ctx(t), 1)
			if err != nil || len(cs) != 0 {
				t.Fatalf("pre-commit: %v, %v; want no committables", cs, err)
			}
			if d == AtLeastOnce {
				// Flushed at the barrier, before any commit.
				if got := e.stable(); got != 2 {
					t.Fatalf("last stable offset after the barrier: %d, want 2", got)
				}
			}
			commit(t, w, 1)
			eventually(t, 30*time.Second, "records never arrived", func() bool { return e.stable() >= 2 })
			e.wantCommitted("a", "b")
			if _, err := e.open(cfg, []checkpoint.Committable{{TransactionalID: "x"}}); err == nil {
				t.Fatal("opened a non-transactional sink with restored transactions")
			}
		})
	}
}

// TestAbort: aborting an open committable makes it lost for good (its
// records never show, a later resume cannot commit it), and aborting one
// its owner committed first reports it committed.
func TestAbort(t *testing.T) {
	e := newEnv(t)
	w := e.mustOpen(e.config(), nil)
	write(t, w, "a")
	done := preCommit(t, w, 1)
	commit(t, w, 1)
	write(t, w, "b")
	open := preCommit(t, w, 2)
	open = slices.DeleteFunc(open, func(c checkpoint.Committable) bool { return c.TransactionalID == done[0].TransactionalID })
	if len(open) != 1 {
		t.Fatalf("checkpoint 2 committables %+v, want one open transaction", open)
	}
	sts, err := Abort(ctx(t), e.plain, nil, append(slices.Clone(done), open...))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("abort: committed one %+v; open one %+v", sts[0], sts[1])
	if sts[0].Outcome != engine.CommitDone || sts[1].Outcome != engine.CommitLost {
		t.Fatalf("outcomes %v, %v; want committed (done before), lost (aborted)", sts[0].Outcome, sts[1].Outcome)
	}
	crash(w)
	// The owner resuming it now (a restore from checkpoint 2) finds it lost.
	if _, err := e.open(e.config(), open); err == nil {
		t.Fatal("a resume of the aborted transaction succeeded")
	}
	e.wantCommitted("a")
}

// TestEventTimeStamps: a record whose encoder sets no timestamp gets the
// event time the runtime passes (WriteAt), one that sets its own keeps
// it, and one without an event time gets the time of writing.
func TestEventTimeStamps(t *testing.T) {
	for _, d := range []Delivery{ExactlyOnce, AtLeastOnce} {
		t.Run(string(d), func(t *testing.T) {
			e := newEnv(t)
			cfg := e.config()
			own := time.UnixMilli(1_600_000_000_000)
			cfg.Encode = func(s string) (*kgo.Record, error) {
				r := kgo.StringRecord(s)
				if s == "own" {
					r.Timestamp = own
				}
				return r, nil
			}
			w := e.openDelivery(cfg, d)
			event := int64(1_700_000_000_123)
			before := time.Now().Add(-time.Second)
			tw := w.(engine.TimestampWriter[string])
			for _, v := range []string{"event", "own"} {
				if err := tw.WriteAt(ctx(t), v, event); err != nil {
					t.Fatal(err)
				}
			}
			if err := tw.WriteAt(ctx(t), "none", -1); err != nil {
				t.Fatal(err)
			}
			if _, err := w.PreCommit(ctx(t), 1); err != nil {
				t.Fatal(err)
			}
			commit(t, w, 1)
			cl := e.cluster.Client(t, kgo.ConsumeTopics(e.topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			got := map[string]time.Time{}
			for len(got) < 3 {
				fs := cl.PollFetches(ctx(t))
				if err := fs.Err0(); err != nil {
					t.Fatal(err)
				}
				fs.EachRecord(func(r *kgo.Record) { got[string(r.Value)] = r.Timestamp })
			}
			if !got["event"].Equal(time.UnixMilli(event)) || !got["own"].Equal(own) || got["none"].Before(before) {
				t.Fatalf("timestamps %v: want event %v, own %v, none after %v", got, time.UnixMilli(event), own, before)
			}
		})
	}
}

// TestReinitialisedDecidedByLog: once a transaction's id is re-initialised
// after the transaction ended (an older owner paused past its session comes
// back, or the owner was killed after its commit and before a manifest
// recorded it), the coordinator's record reads alike after a commit and an
// abort, and the probe is refused either way. The output's log tells them
// apart: a committed transaction is found committed (restoring before it
// would write its output twice), an aborted one lost, and one whose record
// is not in the log is unknown, which fails the restore loudly.
func TestReinitialisedDecidedByLog(t *testing.T) {
	e := newEnv(t)
	w := e.mustOpen(e.config(), nil)
	write(t, w, "a", "b")
	done := preCommit(t, w, 1)
	commit(t, w, 1)
	write(t, w, "c")
	open := preCommit(t, w, 2)
	if len(done) != 1 || len(open) != 1 || done[0].TransactionalID == open[0].TransactionalID {
		t.Fatalf("committables %+v and %+v: want one each, on two slots", done, open)
	}
	for _, c := range append(slices.Clone(done), open...) {
		if c.Record.Topic != e.topic || c.Record.Offset < 0 {
			t.Fatalf("committable %+v names no record of its transaction", c)
		}
	}
	crash(w) // killed after checkpoint 1's commit: no manifest records it

	// Another owner's InitProducerID on both ids: it aborts the open one
	// and moves both records on.
	for _, c := range append(slices.Clone(done), open...) {
		cl := e.cluster.Client(t, kgo.TransactionalID(c.TransactionalID))
		if _, _, err := cl.ProducerID(ctx(t)); err != nil {
			t.Fatalf("re-initialise %s: %v", c.TransactionalID, err)
		}
		t.Logf("%s after re-initialisation: %s", c.TransactionalID, e.describe(c.TransactionalID))
	}

	// Records that are not the transaction's: another producer's, and past
	// the log's end.
	r := &kgo.Record{Topic: e.topic, Value: []byte("plain")}
	if err := e.plain.ProduceSync(ctx(t), r).FirstErr(); err != nil {
		t.Fatal(err)
	}
	other, past := done[0], done[0]
	other.Record.Offset = r.Offset
	past.Record.Offset = r.Offset + 1000

	sts, err := Check(ctx(t), e.plain, []checkpoint.Committable{done[0], open[0], other, past})
	if err != nil {
		t.Fatal(err)
	}
	want := []engine.CommitOutcome{engine.CommitDone, engine.CommitLost, engine.CommitUnknown, engine.CommitUnknown}
	for i, st := range sts {
		t.Logf("%s: %v (record %s, probed %v, refusal %v): %s", st.Committable.TransactionalID, st.Outcome, st.State, st.Probed, st.Refusal, st.Marker)
		if st.Outcome != want[i] {
			t.Errorf("committable %d (%+v): %v, want %v", i, st.Committable.Record, st.Outcome, want[i])
		}
	}
	if t.Failed() {
		return
	}
	err = Validate(ctx(t), e.plain, open)
	var lost *LostError
	if !errors.As(err, &lost) || !strings.Contains(err.Error(), "abort marker") {
		t.Fatalf("Validate of the aborted transaction: %v, want a *LostError naming its abort marker", err)
	}
	if err := Validate(ctx(t), e.plain, []checkpoint.Committable{other}); !errors.Is(err, ErrUnknownOutcome) {
		t.Fatalf("Validate of a committable whose record is another producer's: %v, want ErrUnknownOutcome", err)
	}
	e.wantCommitted("a", "b", "plain")
}

// TestFlushWaitsForRecordsFailedBeforeBuffering: franz-go fails some
// records before it buffers them (here one larger than the client's
// MaxBufferedBytes) and runs their promise on a goroutine of its own,
// which its Flush does not wait for. The barrier's flush must still see
// the failure: a pre-commit that returned first would put the transaction,
// without the record, in the checkpoint, and its commit would follow.
func TestFlushWaitsForRecordsFailedBeforeBuffering(t *testing.T) {
	for _, d := range []Delivery{ExactlyOnce, AtLeastOnce} {
		t.Run(string(d), func(t *testing.T) {
			e := newEnv(t)
			cfg := e.config()
			if d == AtLeastOnce {
				cfg.Delivery, cfg.TransactionalIDPrefix, cfg.TransactionTimeout = d, "", 0
			}
			cfg.ClientOpts = []kgo.Opt{kgo.MaxBufferedBytes(1000)}
			// Several writers: unfixed, the promise loses the race to the
			// pre-commit's look at the failures most of the time, not
			// always.
			id := checkpoint.ID(0)
			for round := range 5 {
				w, err := e.open(cfg, nil)
				if err != nil {
					t.Fatal(err)
				}
				// Every slot's client writes and commits once first, so
				// that it knows the topic: the flush then has nothing to
				// wait for but the record below.
				for range cfg.poolSize() {
					id++
					write(t, w, "small")
					preCommit(t, w, id)
					commit(t, w, id)
				}
				// Alone in its interval: a record buffered with it would
				// have Flush wait for a produce, long enough for the
				// promise to run anyway.
				id++
				write(t, w, strings.Repeat("x", 2000))
				cs, err := w.PreCommit(ctx(t), id)
				w.Close()
				if err == nil {
					t.Fatalf("round %d: pre-commit returned %d committables and no error, though a record of its interval was never written", round, len(cs))
				}
				if !errors.Is(err, kerr.MessageTooLarge) {
					t.Fatalf("round %d: pre-commit failed with %v, want the record's MESSAGE_TOO_LARGE", round, err)
				}
			}
		})
	}
}

// Under transaction version 2 every transaction takes an epoch of its
// producer id, and a transaction at the last epoch (32,766) ends with a
// new producer id for its transactional id: at 100 ms checkpoints each
// slot in use rotates every few hours, a routine event. The slots are
// driven to the edge with InitProducerID (each bumps the epoch); then
// checkpoints go on, and at the first two transactions at the last epoch:
//   - the first commits, and the writer is killed before the next
//     checkpoint: the restore of its committable finds it committed;
//   - the second is pre-committed, and the writer killed before its
//     commit: the restore resumes the commit (which rotates the id) and
//     aborts what was written after the barrier.
//
// Each slot's next transaction must run under a new producer id, and
// every record must be read once.
func TestExactlyOnceAcrossProducerIDRotation(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.PoolSize = MinPoolSize
	ids := TransactionalIDs(e.prefix, 0, MinPoolSize)
	const edge = 32766 - 8
	driven := make([]int64, len(ids))
	errs := make(chan error, len(ids))
	c := ctx(t)
	for i, id := range ids {
		go func() {
			// Staggered, so that the restore after the first rotation
			// (whose start bumps every slot's epoch) leaves the next
			// slot short of the last epoch.
			pid, epoch := int64(-1), int16(-1)
			for epoch < edge-int16(4*i) {
				req := kmsg.NewPtrInitProducerIDRequest()
				req.TransactionalID, req.TransactionTimeoutMillis = &id, 60_000
				req.ProducerID, req.ProducerEpoch = pid, epoch
				resp, err := req.RequestWith(c, e.plain)
				if err == nil {
					err = kerr.ErrorForCode(resp.ErrorCode)
				}
				if err != nil {
					errs <- fmt.Errorf("init %s at epoch %d: %w", id, epoch, err)
					return
				}
				pid, epoch = resp.ProducerID, resp.ProducerEpoch
			}
			driven[i] = pid
			errs <- nil
		}()
	}
	for range ids {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		t.Logf("%s driven to %s", id, e.describe(id))
	}

	const lastEpoch = math.MaxInt16 - 1
	w := e.mustOpen(cfg, nil)
	var want []string
	rotated := map[string]int64{} // transactional id -> producer id it must have left
	var committedThenKilled, resumedThenKilled bool
	for i := checkpoint.ID(1); i <= 60 && (!committedThenKilled || !resumedThenKilled || len(rotated) > 0); i++ {
		v := fmt.Sprintf("v%d", i)
		write(t, w, v)
		want = append(want, v)
		cs := preCommit(t, w, i)
		if len(cs) != 1 {
			t.Fatalf("checkpoint %d: committables %+v, want one", i, cs)
		}
		cm := cs[0]
		if old, ok := rotated[cm.TransactionalID]; ok {
			if cm.ProducerID == old {
				t.Fatalf("checkpoint %d: %s still under producer id %d (epoch %d) after a transaction at the last epoch", i, cm.TransactionalID, old, cm.Epoch)
			}
			t.Logf("checkpoint %d: %s under producer id %d now (epoch %d)", i, cm.TransactionalID, cm.ProducerID, cm.Epoch)
			delete(rotated, cm.TransactionalID)
		}
		switch {
		case cm.Epoch != lastEpoch:
			commit(t, w, i)
		case !committedThenKilled:
			commit(t, w, i)
			t.Logf("checkpoint %d: committed %s at the last epoch; coordinator: %s", i, cm.TransactionalID, e.describe(cm.TransactionalID))
			sts, err := Check(ctx(t), e.plain, cs)
			if err != nil {
				t.Fatal(err)
			}
			if sts[0].Outcome != engine.CommitDone {
				t.Fatalf("Check of the committed transaction at the last epoch: %+v, want committed", sts[0])
			}
			crash(w)
			w = e.mustOpen(cfg, cs)
			committedThenKilled = true
			rotated[cm.TransactionalID] = cm.ProducerID
		case !resumedThenKilled:
			write(t, w, fmt.Sprintf("after-barrier-%d", i))
			crash(w)
			w = e.mustOpen(cfg, cs)
			t.Logf("checkpoint %d: the restore committed %s at the last epoch; coordinator: %s", i, cm.TransactionalID, e.describe(cm.TransactionalID))
			resumedThenKilled = true
			rotated[cm.TransactionalID] = cm.ProducerID
		default:
			commit(t, w, i)
		}
	}
	if !committedThenKilled || !resumedThenKilled || len(rotated) > 0 {
		t.Fatalf("the checkpoints did not cross both rotations (after a commit: %v; in a restore's commit: %v; not seen rotated: %v)",
			committedThenKilled, resumedThenKilled, rotated)
	}
	// The last restore's slot is re-initialised once a checkpoint completes.
	write(t, w, "last")
	want = append(want, "last")
	preCommit(t, w, 100)
	commit(t, w, 100)
	for i, id := range ids {
		t.Logf("%s after: %s (driven to producer id %d)", id, e.describe(id), driven[i])
	}
	e.wantCommitted(want...)
}

// With --delivery none nothing is flushed at the barriers, so a clean stop
// (the final checkpoint, then Close, as at the end of the input, a drain
// or a revoke) must flush what the client still buffers: closing the
// client failed it, 500 of 500 records here, with a warning only.
func TestNoneKeepsItsOutputAtClose(t *testing.T) {
	e := newEnv(t)
	w := e.openDelivery(e.config(), None)
	var want []string
	for i := range 500 {
		want = append(want, fmt.Sprint(i))
	}
	write(t, w, want...)
	preCommit(t, w, 1)
	commit(t, w, 1)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	e.wantCommitted(want...)
}
