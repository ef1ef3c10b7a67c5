package sink

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// The case merged.go guards: producer id 33's transaction at epoch 40
// committed without out/1's marker; its next transaction, at epoch 41,
// wrote out/1 and out/2 and is open. out/1's open range begins with the
// batch of epoch 40; out/2's with the open transaction's own.
func mergedCase() (*fakeHangingAdmin, map[string]map[int32]int16, openTxnAt) {
	f := &fakeHangingAdmin{open: map[string]map[int32][]kadm.DescribedProducer{"out": {
		0: {{Topic: "out", Partition: 0, ProducerID: 33, ProducerEpoch: 40, CurrentTxnStartOffset: -1}},
		1: {
			{Topic: "out", Partition: 1, ProducerID: 33, ProducerEpoch: 41, CurrentTxnStartOffset: 500},
			// Another task's, open at an older epoch: its business.
			{Topic: "out", Partition: 1, ProducerID: 7, ProducerEpoch: 3, CurrentTxnStartOffset: 480},
		},
		2: {{Topic: "out", Partition: 2, ProducerID: 33, ProducerEpoch: 41, CurrentTxnStartOffset: 900}},
	}}}
	first := map[string]map[int32]int16{"out": {1: 40, 2: 41}}
	return f, first, openTxnAt{txnID: "job-out-0-1", pid: 33, epoch: 41, parts: kadm.TopicsSet{"out": {}}}
}

// fakeFirstEpochs answers from first and records what it was asked.
func fakeFirstEpochs(first map[string]map[int32]int16, asked *map[string]map[int32]int64) firstEpochsFunc {
	return func(_ context.Context, starts map[string]map[int32]int64) (map[string]map[int32]int16, error) {
		*asked = starts
		out := map[string]map[int32]int16{}
		for t, ps := range starts {
			out[t] = map[int32]int16{}
			for p := range ps {
				if e, ok := first[t][p]; ok {
					out[t][p] = e
				}
			}
		}
		return out, nil
	}
}

func TestFindMerged(t *testing.T) {
	f, first, txn := mergedCase()
	var asked map[string]map[int32]int64
	ms, err := findMerged(context.Background(), slog.New(slog.DiscardHandler), f, fakeFirstEpochs(first, &asked), []openTxnAt{txn})
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || ms[0].partition != 1 || ms[0].start != 500 || ms[0].firstEpoch != 40 || ms[0].epoch != 41 {
		t.Fatalf("found %v, want out/1 from 500 (epoch 40, then 41)", ms)
	}
	if len(asked["out"]) != 2 || asked["out"][1] != 500 || asked["out"][2] != 900 {
		t.Errorf("read the first batches at %v, want out/1 at 500 and out/2 at 900", asked)
	}
	err = mergedError(ms)
	var me *MergedTransactionError
	if !errors.As(err, &me) || len(me.Abort) != 1 || me.Abort[0] != "`kafka-transactions.sh --bootstrap-server BROKERS abort --topic out --partition 1 --start-offset 500`" {
		t.Fatalf("error %v, want the abort command for out/1 from 500", err)
	}
}

// A range open under the producer id at an older epoch than the open
// transaction, on a partition the open one has not written, is merged as
// soon as it does (or aborted with it): found without a read.
func TestFindMergedOlderRangeNotYetWritten(t *testing.T) {
	f, first, txn := mergedCase()
	f.open["out"][2][0].ProducerEpoch = 39
	first["out"] = map[int32]int16{1: 41}
	var asked map[string]map[int32]int64
	ms, err := findMerged(context.Background(), slog.New(slog.DiscardHandler), f, fakeFirstEpochs(first, &asked), []openTxnAt{txn})
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || ms[0].partition != 2 || ms[0].firstEpoch != 39 {
		t.Fatalf("found %v, want out/2 (epoch 39)", ms)
	}
	if len(asked["out"]) != 1 {
		t.Errorf("read %v, want out/1 only", asked)
	}
}

// Only the partitions the open transaction names are its business, and
// nothing is read where nothing is open.
func TestFindMergedNothing(t *testing.T) {
	f, first, txn := mergedCase()
	txn.parts = kadm.TopicsSet{"out": {0: {}}}
	var asked map[string]map[int32]int64
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
	var asked map[string]map[int32]int64
	_, err := findMerged(context.Background(), slog.New(slog.DiscardHandler), deniedAdmin{&fakeHangingAdmin{}}, fakeFirstEpochs(first, &asked), []openTxnAt{txn})
	var u *uncheckedError
	if !errors.As(err, &u) {
		t.Fatalf("%v, want an uncheckedError", err)
	}
}

type deniedAdmin struct{ *fakeHangingAdmin }

func (deniedAdmin) DescribeProducers(context.Context, kadm.TopicsSet) (kadm.DescribedProducersTopics, error) {
	return nil, kerr.TopicAuthorizationFailed
}
