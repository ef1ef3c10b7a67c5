package sink

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// The case merged.go guards: producer id 33's transaction at epoch 40
// committed without out/1's marker; its next transaction, at epoch 41,
// wrote out/1 and out/2 and is open. out/1's open range begins with the
// batch of epoch 40; out/2's with the open transaction's own.
func mergedCase() (*fakeHangingAdmin, map[batchAt]int16, openTxnAt) {
	f := &fakeHangingAdmin{open: map[string]map[int32][]kadm.DescribedProducer{"out": {
		0: {{Topic: "out", Partition: 0, ProducerID: 33, ProducerEpoch: 40, CurrentTxnStartOffset: -1}},
		1: {
			{Topic: "out", Partition: 1, ProducerID: 33, ProducerEpoch: 41, CurrentTxnStartOffset: 500},
			// Another task's, open at an older epoch: its business.
			{Topic: "out", Partition: 1, ProducerID: 7, ProducerEpoch: 3, CurrentTxnStartOffset: 480},
		},
		2: {{Topic: "out", Partition: 2, ProducerID: 33, ProducerEpoch: 41, CurrentTxnStartOffset: 900}},
	}}}
	first := map[batchAt]int16{{"out", 1, 500}: 40, {"out", 2, 900}: 41, {"out", 1, 480}: 3}
	return f, first, openTxnAt{txnID: "job-out-0-1", pid: 33, epoch: 41, parts: kadm.TopicsSet{"out": {}}}
}

// fakeFirstEpochs answers from first and records what it was asked.
func fakeFirstEpochs(first map[batchAt]int16, asked *[]batchAt) firstEpochsFunc {
	return func(_ context.Context, at []batchAt) (map[batchAt]int16, error) {
		*asked = append(*asked, at...)
		out := map[batchAt]int16{}
		for _, b := range at {
			if e, ok := first[b]; ok {
				out[b] = e
			}
		}
		return out, nil
	}
}

func TestFindMerged(t *testing.T) {
	f, first, txn := mergedCase()
	var asked []batchAt
	ms, err := findMerged(context.Background(), slog.New(slog.DiscardHandler), f, fakeFirstEpochs(first, &asked), []openTxnAt{txn})
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || ms[0].partition != 1 || ms[0].start != 500 || ms[0].firstEpoch != 40 || ms[0].epoch != 41 {
		t.Fatalf("found %v, want out/1 from 500 (epoch 40, then 41)", ms)
	}
	if !slices.Contains(asked, batchAt{"out", 1, 500}) || !slices.Contains(asked, batchAt{"out", 2, 900}) || len(asked) != 2 {
		t.Errorf("read the first batches at %v, want out/1 at 500 and out/2 at 900", asked)
	}
	err = mergedError(ms)
	var me *MergedTransactionError
	if !errors.As(err, &me) || len(me.Abort) != 1 || me.Abort[0] != "`kafka-transactions.sh --bootstrap-server BROKERS abort --topic out --partition 1 --start-offset 500`" {
		t.Fatalf("error %v, want the abort command for out/1 from 500", err)
	}
	if !me.Deadline.IsZero() || strings.Contains(err.Error(), "Copy them before") {
		t.Errorf("a deadline without the coordinator's: %v", err)
	}
	// The coordinator's deadline of the open transaction: the error says
	// by when to act, before the timeout aborts the older records too.
	txn.deadline = time.Date(2026, 12, 6, 18, 30, 0, 0, time.UTC)
	if ms, err = findMerged(context.Background(), slog.New(slog.DiscardHandler), f, fakeFirstEpochs(first, &asked), []openTxnAt{txn}); err != nil {
		t.Fatal(err)
	}
	err = mergedError(ms)
	if !errors.As(err, &me) || !me.Deadline.Equal(txn.deadline) || !strings.Contains(err.Error(), "Copy them before 2026-12-06T18:30:00Z") {
		t.Errorf("error %v (deadline %v), want the coordinator's deadline", err, me.Deadline)
	}
}

// A range open under the producer id at an older epoch than the open
// transaction, on a partition the open one has not written, is merged as
// soon as it does (or aborted with it): found without a read.
func TestFindMergedOlderRangeNotYetWritten(t *testing.T) {
	f, first, txn := mergedCase()
	f.open["out"][2][0].ProducerEpoch = 39
	first[batchAt{"out", 1, 500}] = 41
	var asked []batchAt
	ms, err := findMerged(context.Background(), slog.New(slog.DiscardHandler), f, fakeFirstEpochs(first, &asked), []openTxnAt{txn})
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || ms[0].partition != 2 || ms[0].firstEpoch != 39 {
		t.Fatalf("found %v, want out/2 (epoch 39)", ms)
	}
	if len(asked) != 1 || asked[0] != (batchAt{"out", 1, 500}) {
		t.Errorf("read %v, want out/1 only", asked)
	}
}

// Only the partitions the open transaction names are its business, and
// nothing is read where nothing is open.
func TestFindMergedNothing(t *testing.T) {
	f, first, txn := mergedCase()
	txn.parts = kadm.TopicsSet{"out": {0: {}}}
	var asked []batchAt
	ms, err := findMerged(context.Background(), slog.New(slog.DiscardHandler), f, fakeFirstEpochs(first, &asked), []openTxnAt{txn})
	if err != nil || len(ms) != 0 || asked != nil {
		t.Fatalf("found %v, %v, read %v; want nothing", ms, err, asked)
	}
	if ms, err := findMerged(context.Background(), slog.New(slog.DiscardHandler), f, fakeFirstEpochs(first, &asked), nil); err != nil || ms != nil || f.described != 1 {
		t.Fatalf("with no open transaction: %v, %v, %d described; want nothing asked", ms, err, f.described)
	}
}

// Without READ on the output the check cannot look: the caller warns.
func TestFindMergedUnauthorized(t *testing.T) {
	_, first, txn := mergedCase()
	var asked []batchAt
	_, err := findMerged(context.Background(), slog.New(slog.DiscardHandler), deniedAdmin{&fakeHangingAdmin{}}, fakeFirstEpochs(first, &asked), []openTxnAt{txn})
	var u *uncheckedError
	if !errors.As(err, &u) {
		t.Fatalf("%v, want an uncheckedError", err)
	}
}

// deniedAdmin answers as to a principal without DESCRIBE on the topics:
// their metadata fails, and so does DescribeProducers.
type deniedAdmin struct{ *fakeHangingAdmin }

func (deniedAdmin) Metadata(_ context.Context, topics ...string) (kadm.Metadata, error) {
	m := kadm.Metadata{Topics: kadm.TopicDetails{}}
	for _, t := range topics {
		m.Topics[t] = kadm.TopicDetail{Topic: t, Err: kerr.TopicAuthorizationFailed}
	}
	return m, nil
}

func (deniedAdmin) DescribeProducers(context.Context, kadm.TopicsSet) (kadm.DescribedProducersTopics, error) {
	return nil, kerr.TopicAuthorizationFailed
}

// The chaos run's false alarm (seed 24002): a task's slots all had their
// transactions open on its one output partition, each from an offset of
// its own. An epoch read for one range must not be taken for another's.
func TestFindMergedSeveralRangesOfOnePartition(t *testing.T) {
	f := &fakeHangingAdmin{open: map[string]map[int32][]kadm.DescribedProducer{"out": {
		1: {
			{Topic: "out", Partition: 1, ProducerID: 74, ProducerEpoch: 294, CurrentTxnStartOffset: 12363},
			{Topic: "out", Partition: 1, ProducerID: 68, ProducerEpoch: 3, CurrentTxnStartOffset: 12385},
		},
	}}}
	first := map[batchAt]int16{{"out", 1, 12363}: 294, {"out", 1, 12385}: 3}
	txns := []openTxnAt{
		{txnID: "t-1-1", pid: 74, epoch: 294, parts: kadm.TopicsSet{"out": {1: {}}}},
		{txnID: "t-1-3", pid: 68, epoch: 3, parts: kadm.TopicsSet{"out": {1: {}}}},
	}
	var asked []batchAt
	ms, err := findMerged(context.Background(), slog.New(slog.DiscardHandler), f, fakeFirstEpochs(first, &asked), txns)
	if err != nil || len(ms) != 0 {
		t.Fatalf("found %v, %v; want nothing merged", ms, err)
	}
	if len(asked) != 2 {
		t.Errorf("read %v, want both ranges' first batches", asked)
	}
}
