package main

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/testcluster"
)

// recorded reads what storage records of task 0 of jobx.
func recorded(t *testing.T, st checkpoint.Storage) checkpoint.Recorded {
	t.Helper()
	ctx := t.Context()
	l, err := checkpoint.ListTask(ctx, st, "jobx", 0)
	if err != nil {
		t.Fatal(err)
	}
	var ms []checkpoint.Manifest
	for _, id := range l.Completed {
		m, err := checkpoint.ReadManifest(ctx, st, "jobx", 0, id)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	r, err := checkpoint.ReadRecorded(ctx, st, "jobx", 0, ms, l.CommitRecords)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestCheckpointsRecordByHand(t *testing.T) {
	for _, outcome := range []string{"committed", "aborted"} {
		t.Run(outcome, func(t *testing.T) {
			uri, st := testStorage(t)
			txn := testManifest(0, 3, 100).Operators[2].Committables[0]
			code, out, stderr := runCLI(t, env(), "checkpoints", "record", "--checkpoints", uri, "--name", "jobx", "--task", "0", "--id", "3", "--outcome", outcome)
			if code != 0 {
				t.Fatalf("exit %d: %s%s", code, out, stderr)
			}
			r := recorded(t, st)
			if r.Committed[txn.Key()] != (outcome == "committed") || r.Aborted[txn.Key()] != (outcome == "aborted") {
				t.Fatalf("storage records %+v after --outcome %s\n%s", r, outcome, out)
			}
			code, out, _ = runCLI(t, env(), "checkpoints", "record", "--checkpoints", uri, "--name", "jobx", "--task", "0", "--id", "3", "--outcome", outcome)
			if code != 0 || !strings.Contains(out, "nothing to record") {
				t.Fatalf("second record: exit %d: %s", code, out)
			}
		})
	}
}

func TestCheckpointsRecordRefusesBadSettings(t *testing.T) {
	uri, _ := testStorage(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--task", "0", "--id", "3", "--outcome", "maybe"}, "--outcome: \"maybe\""},
		{[]string{"--task", "0", "--id", "3"}, "--brokers and --topics are required"},
		{[]string{"--id", "3", "--outcome", "committed"}, "--task: required"},
	} {
		args := append([]string{"checkpoints", "record", "--checkpoints", uri, "--name", "jobx"}, tc.args...)
		code, out, stderr := runCLI(t, env(), args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, want 2 naming %q: %s%s", tc.args, code, tc.want, out, stderr)
		}
	}
}

// TestCheckpointsRecordFindsTheRecords: without --outcome, record looks for
// each transaction's records by producer id and epoch, read_committed: a
// committed transaction's are there, an aborted one's are not, and the
// topic still holds everything written to it, so not found is aborted.
func TestCheckpointsRecordFindsTheRecords(t *testing.T) {
	c := testcluster.Kafka(t)
	topic := testcluster.UniqueName(t, "out")
	c.CreateTopics(t, 2, topic)
	ctx := t.Context()
	p := c.Client(t, kgo.TransactionalID(testcluster.UniqueName(t, "txn")), kgo.DefaultProduceTopic(topic))
	txn := func(commit bool, n int) checkpoint.Committable {
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if err := p.ProduceSync(ctx, &kgo.Record{Key: []byte{byte(i)}, Value: []byte("v")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		pid, epoch, err := p.ProducerID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
		return checkpoint.Committable{Operator: "output", TransactionalID: "jobx-output-0-1", ProducerID: pid, Epoch: epoch}
	}
	committed, aborted := txn(true, 3), txn(false, 2)
	if committed.Key() == aborted.Key() {
		t.Fatalf("two transactions under one producer id and epoch (%v): record cannot tell them apart", committed.Key())
	}
	uri, st := testStorage(t)
	m := testManifest(0, 7, 300)
	m.Operators[2].Committables = []checkpoint.Committable{committed, aborted}
	writeManifest(t, st, m)

	code, out, stderr := runCLI(t, env(), "checkpoints", "record", "--checkpoints", uri, "--name", "jobx", "--task", "0", "--id", "7",
		"--brokers", strings.Join(c.Brokers, ","), "--topics", topic)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out, stderr)
	}
	t.Log(out)
	r := recorded(t, st)
	if !r.Committed[committed.Key()] || !r.Aborted[aborted.Key()] || r.Committed[aborted.Key()] {
		t.Fatalf("storage records %+v; want %v committed and %v aborted", r, committed.Key(), aborted.Key())
	}
}

// Under transaction version 1 a producer's transactions share an epoch:
// an aborted transaction after a committed one has the same producer id
// and epoch, and its records cannot be told apart. record refuses to
// decide there, rather than record the aborted one committed.
func TestCheckpointsRecordRefusesTransactionVersion1(t *testing.T) {
	fake, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close)
	brokers := fake.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).UpdateFeatures(t.Context(), false, kadm.FeatureUpdate{Feature: "transaction.version", MaxVersionLevel: 1, UpgradeType: 3})
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("set transaction.version 1: %v", err)
	}
	if _, err := kadm.NewClient(cl).CreateTopic(t.Context(), 1, 1, nil, "out"); err != nil {
		t.Fatal(err)
	}
	uri, st := testStorage(t)
	m := testManifest(0, 7, 300)
	m.Operators[2].Committables = []checkpoint.Committable{{Operator: "output", TransactionalID: "jobx-output-0-1", ProducerID: 4, Epoch: 0}}
	writeManifest(t, st, m)
	code, out, stderr := runCLI(t, env(), "checkpoints", "record", "--checkpoints", uri, "--name", "jobx", "--task", "0", "--id", "7",
		"--brokers", strings.Join(brokers, ","), "--topics", "out")
	if code == 0 || !strings.Contains(stderr, "transaction version 1") {
		t.Fatalf("exit %d: %s%s; want a refusal naming transaction version 1", code, out, stderr)
	}
}
