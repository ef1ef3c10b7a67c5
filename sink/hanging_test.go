package sink

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/internal/testcluster"
)

// fakeHangingAdmin answers DescribeProducers from open (the transactions
// each partition holds open, by producer id) and applies WriteTxnMarkers to
// it, or fails them with writeErr.
type fakeHangingAdmin struct {
	open      map[string]map[int32][]kadm.DescribedProducer
	writeErr  error
	described int
	written   []kadm.TxnMarkers
	// partitions are each topic's partition count (default: enough for
	// those open names, at least one); metaErrs the errors its metadata answers first, in turn.
	partitions map[string]int32
	metaErrs   map[string][]error
}

func (f *fakeHangingAdmin) Metadata(_ context.Context, topics ...string) (kadm.Metadata, error) {
	m := kadm.Metadata{Topics: kadm.TopicDetails{}}
	for _, t := range topics {
		d := kadm.TopicDetail{Topic: t, Partitions: kadm.PartitionDetails{}}
		n, known := f.partitions[t]
		if !known {
			_, known = f.open[t]
			n = 1
			for p := range f.open[t] {
				n = max(n, p+1)
			}
		}
		switch {
		case len(f.metaErrs[t]) > 0:
			d.Err, f.metaErrs[t] = f.metaErrs[t][0], f.metaErrs[t][1:]
		case !known:
			d.Err = kerr.UnknownTopicOrPartition
		default:
			for p := range n {
				d.Partitions[p] = kadm.PartitionDetail{Topic: t, Partition: p}
			}
		}
		m.Topics[t] = d
	}
	return m, nil
}

func (f *fakeHangingAdmin) DescribeProducers(_ context.Context, s kadm.TopicsSet) (kadm.DescribedProducersTopics, error) {
	f.described++
	out := kadm.DescribedProducersTopics{}
	for t, ps := range s {
		dt := kadm.DescribedProducersTopic{Topic: t, Partitions: kadm.DescribedProducersPartitions{}}
		if len(ps) == 0 {
			// kadm asks the topic's metadata: one that fails gives no
			// partition, and no error.
			continue
		}
		for p := range ps {
			dp := kadm.DescribedProducersPartition{Topic: t, Partition: p, ActiveProducers: kadm.DescribedProducers{}}
			for _, d := range f.open[t][p] {
				dp.ActiveProducers[d.ProducerID] = d
			}
			dt.Partitions[p] = dp
		}
		out[t] = dt
	}
	return out, nil
}

// firstEpochsOf reads the first batch of each range f holds open as at
// the range's newest epoch: nothing merged.
func firstEpochsOf(f *fakeHangingAdmin) firstEpochsFunc {
	return func(_ context.Context, at []batchAt) (map[batchAt]int16, error) {
		out := map[batchAt]int16{}
		for _, b := range at {
			for _, d := range f.open[b.topic][b.partition] {
				if d.CurrentTxnStartOffset == b.offset {
					out[b] = d.ProducerEpoch
				}
			}
		}
		return out, nil
	}
}

func (f *fakeHangingAdmin) WriteTxnMarkers(_ context.Context, ms ...kadm.TxnMarkers) (kadm.TxnMarkersResponses, error) {
	if f.writeErr != nil {
		return nil, f.writeErr
	}
	f.written = append(f.written, ms...)
	for _, m := range ms {
		for t, ps := range m.Topics {
			for p := range ps {
				for i, d := range f.open[t][p] {
					if d.ProducerID == m.ProducerID && d.ProducerEpoch <= m.ProducerEpoch {
						f.open[t][p][i].CurrentTxnStartOffset = -1
					}
				}
			}
		}
	}
	return kadm.TxnMarkersResponses{}, nil
}

// The chaos run's case (seed 23001): task 1's slot 1 (producer id 33) had
// its transaction open at epoch 671 on out/1 when its owner was killed; the
// next owner's InitProducerID aborted it (epoch 673 now) but out/1 missed the
// marker and holds the transaction open from offset 33727.
func chaosCase() (ids []string, pids []int64, epochs []int16, before map[int]txnBefore, f *fakeHangingAdmin) {
	ids = []string{"job-output-1-0", "job-output-1-1", "job-output-1-2"}
	pids = []int64{104, 33, 60}
	epochs = []int16{673, 673, 667}
	before = map[int]txnBefore{
		0: {state: "CompleteCommit", pid: 104, epoch: 672},
		1: {state: "Ongoing", pid: 33, epoch: 671, topics: kadm.TopicsSet{"out": {1: {}}}},
		2: {state: "CompleteCommit", pid: 60, epoch: 666},
	}
	f = &fakeHangingAdmin{open: map[string]map[int32][]kadm.DescribedProducer{"out": {
		1: {
			{Topic: "out", Partition: 1, ProducerID: 33, ProducerEpoch: 671, CoordinatorEpoch: 4, CurrentTxnStartOffset: 33727},
			{Topic: "out", Partition: 1, ProducerID: 104, ProducerEpoch: 672, CoordinatorEpoch: 4, CurrentTxnStartOffset: -1},
			// Another task's transaction, open and its own business.
			{Topic: "out", Partition: 1, ProducerID: 7, ProducerEpoch: 700, CoordinatorEpoch: 4, CurrentTxnStartOffset: 33740},
		},
	}}}
	return
}

func TestCloseHangingAbortsWhatTheInitAborted(t *testing.T) {
	ids, pids, epochs, before, f := chaosCase()
	closed, err := closeHanging(context.Background(), slog.New(slog.DiscardHandler), f, firstEpochsOf(f), nil, []string{"out"}, ids, pids, epochs, before)
	if err != nil {
		t.Fatal(err)
	}
	if len(closed) != 1 || closed[0].slot != 1 || closed[0].commit || closed[0].start != 33727 {
		t.Fatalf("closed %+v, want slot 1's transaction from 33727 aborted", closed)
	}
	want := kadm.TxnMarkers{ProducerID: 33, ProducerEpoch: 671, Commit: false, CoordinatorEpoch: 4, Topics: kadm.TopicsSet{"out": {1: {}}}}
	if len(f.written) != 1 || f.written[0].ProducerID != want.ProducerID || f.written[0].ProducerEpoch != want.ProducerEpoch ||
		f.written[0].Commit || f.written[0].CoordinatorEpoch != want.CoordinatorEpoch || !f.written[0].Topics.Lookup("out", 1) || len(f.written[0].Topics) != 1 {
		t.Fatalf("markers written %+v, want %+v", f.written, want)
	}
	if f.open["out"][1][2].CurrentTxnStartOffset != 33740 {
		t.Error("another producer's open transaction was closed")
	}
	if f.described != 2 {
		t.Errorf("%d DescribeProducers, want 2 (find, then confirm closed)", f.described)
	}
}

// The outcomes a coordinator records that decide a hanging transaction:
// under transaction version 2, ending one takes the next epoch, which so
// names the transaction that wrote at the one before.
func TestCloseHangingDecided(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before txnBefore
		commit bool
	}{
		// The owner died after its EndTxn: the commit's marker missed out/1.
		{"committing", txnBefore{state: "PrepareCommit", pid: 33, epoch: 672, topics: kadm.TopicsSet{"out": {1: {}}}}, true},
		{"aborting", txnBefore{state: "PrepareAbort", pid: 33, epoch: 672, topics: kadm.TopicsSet{"out": {1: {}}}}, false},
		// As Kafka has it: the coordinator drops a partition from the
		// transaction's as soon as it skips its marker, while the others'
		// are pending, or all are done and the completion is not yet
		// written. Only asking all of the topic's finds out/1.
		{"committing, out/1 dropped", txnBefore{state: "PrepareCommit", pid: 33, epoch: 672, topics: kadm.TopicsSet{"out": {0: {}}}}, true},
		{"aborting, out/1 dropped", txnBefore{state: "PrepareAbort", pid: 33, epoch: 672, topics: kadm.TopicsSet{"out": {0: {}}}}, false},
		{"aborting, every partition done", txnBefore{state: "PrepareAbort", pid: 33, epoch: 672}, false},
		// An earlier open found it Ongoing, its InitProducerID aborted it,
		// and the check failed (the partition had no leader yet): the
		// restart finds the abort done.
		// The coordinator no longer names the partitions: only asking all
		// of the topic's finds out/1.
		{"aborted", txnBefore{state: "CompleteAbort", pid: 33, epoch: 672}, false},
		{"committed", txnBefore{state: "CompleteCommit", pid: 33, epoch: 672}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ids, pids, epochs, _, f := chaosCase()
			// Slot 1's record alone: the others' would have every
			// partition asked anyway.
			before := map[int]txnBefore{1: tc.before}
			closed, err := closeHanging(context.Background(), slog.New(slog.DiscardHandler), f, firstEpochsOf(f), nil, []string{"out"}, ids, pids, epochs, before)
			if err != nil {
				t.Fatal(err)
			}
			if len(closed) != 1 || closed[0].commit != tc.commit || len(f.written) != 1 || f.written[0].Commit != tc.commit || f.written[0].ProducerEpoch != 671 {
				t.Fatalf("closed %+v, markers %+v: want one marker at epoch 671, commit %v", closed, f.written, tc.commit)
			}
		})
	}
}

func TestCloseHangingUndecidedFails(t *testing.T) {
	for name, b := range map[string]txnBefore{
		// An older owner still running added out/1 to its Ongoing
		// transaction after the record was read; the initialisation
		// aborted both, and out/1's marker was skipped. Asking only the
		// partitions the record named left it open, with nothing said.
		"added after the record": {state: "Ongoing", pid: 33, epoch: 671, topics: kadm.TopicsSet{"out": {0: {}}}},
		// An older transaction than the one the coordinator had open:
		// which way it went is not on record.
		"older epoch": {state: "Ongoing", pid: 33, epoch: 672, topics: kadm.TopicsSet{"out": {1: {}}}},
		// Open at that epoch, but not on that partition.
		"other partition": {state: "Ongoing", pid: 33, epoch: 671, topics: kadm.TopicsSet{"out": {2: {}}}},
		// Ended at the same epoch: transaction version 1, where every
		// transaction of the producer shares it.
		"same epoch": {state: "CompleteCommit", pid: 33, epoch: 671},
		"two ago":    {state: "CompleteAbort", pid: 33, epoch: 673},
		// Initialised since, by a start whose check did not finish.
		"initialised since": {state: "Empty", pid: 33, epoch: 673},
	} {
		t.Run(name, func(t *testing.T) {
			ids, pids, epochs, _, f := chaosCase()
			before := map[int]txnBefore{1: b} // alone, as in TestCloseHangingDecided
			_, err := closeHanging(context.Background(), slog.New(slog.DiscardHandler), f, firstEpochsOf(f), nil, []string{"out"}, ids, pids, epochs, before)
			var he *HangingTransactionError
			if !errors.As(err, &he) || !strings.Contains(err.Error(), "out/1 from offset 33727") || len(f.written) != 0 {
				t.Fatalf("got %v, markers %+v; want a HangingTransactionError naming out/1 from 33727 and no marker", err, f.written)
			}
		})
	}
}

func TestCloseHangingWriteRefusedSaysHow(t *testing.T) {
	ids, pids, epochs, before, f := chaosCase()
	f.writeErr = kerr.ClusterAuthorizationFailed
	_, err := closeHanging(context.Background(), slog.New(slog.DiscardHandler), f, firstEpochsOf(f), nil, []string{"out"}, ids, pids, epochs, before)
	var he *HangingTransactionError
	if !errors.As(err, &he) || !strings.Contains(err.Error(), "kafka-transactions.sh --bootstrap-server BROKERS abort --topic out --partition 1 --start-offset 33727") ||
		!strings.Contains(err.Error(), "CLUSTER_AUTHORIZATION_FAILED") {
		t.Fatalf("got %v, want the abort command and the broker's refusal", err)
	}
}

// No transaction on record, or one of another producer id (the id was
// mapped anew, so its transactions are not continued): no question asked.
func TestCloseHangingNothingToAsk(t *testing.T) {
	for name, b := range map[string]txnBefore{
		"expired":           {state: "Dead", pid: 33, epoch: 672},
		"other producer id": {state: "Ongoing", pid: 34, epoch: 671, topics: kadm.TopicsSet{"out": {1: {}}}},
	} {
		t.Run(name, func(t *testing.T) {
			ids, pids, epochs, before, f := chaosCase()
			before = map[int]txnBefore{1: b}
			closed, err := closeHanging(context.Background(), slog.New(slog.DiscardHandler), f, firstEpochsOf(f), nil, []string{"out"}, ids, pids, epochs, before)
			if err != nil || len(closed) != 0 || f.described != 0 {
				t.Fatalf("closed %v, %v, %d DescribeProducers; want nothing asked", closed, err, f.described)
			}
		})
	}
	// On record, but the marker landed: asked, nothing written.
	ids, pids, epochs, before, f := chaosCase()
	f.open["out"][1][0].CurrentTxnStartOffset = -1
	closed, err := closeHanging(context.Background(), slog.New(slog.DiscardHandler), f, firstEpochsOf(f), nil, []string{"out"}, ids, pids, epochs, before)
	if err != nil || len(closed) != 0 || f.described != 1 || len(f.written) != 0 {
		t.Fatalf("closed %v, %v, %d DescribeProducers, markers %v; want one question and no marker", closed, err, f.described, f.written)
	}
}

// A sink topic's metadata that fails (no leader yet, a broker moving) must
// not pass for a topic with nothing open: kadm's whole-topic
// DescribeProducers answers such a topic with no partition and no error.
// The check waits for the metadata, then finds the range. A topic that
// does not exist holds nothing: nothing is asked, and the writer goes on.
func TestCloseHangingWaitsForTheTopicsMetadata(t *testing.T) {
	ids, pids, epochs, before, f := chaosCase()
	before[1] = txnBefore{state: "CompleteAbort", pid: 33, epoch: 672} // names no partition
	f.metaErrs = map[string][]error{"out": {kerr.LeaderNotAvailable, kerr.LeaderNotAvailable}}
	closed, err := closeHanging(context.Background(), slog.New(slog.DiscardHandler), f, firstEpochsOf(f), nil, []string{"out"}, ids, pids, epochs, before)
	if err != nil {
		t.Fatal(err)
	}
	if len(closed) != 1 || closed[0].start != 33727 || closed[0].commit || len(f.metaErrs["out"]) != 0 {
		t.Fatalf("closed %+v (metadata errors left %v), want out/1 from 33727 aborted after the metadata answered", closed, f.metaErrs["out"])
	}

	// A topic error Kafka does not call retriable fails the check.
	ids, pids, epochs, before, f = chaosCase()
	before[1] = txnBefore{state: "CompleteAbort", pid: 33, epoch: 672}
	f.metaErrs = map[string][]error{"out": {kerr.InvalidTopicException}}
	if closed, err := closeHanging(context.Background(), slog.New(slog.DiscardHandler), f, firstEpochsOf(f), nil, []string{"out"}, ids, pids, epochs, before); !errors.Is(err, kerr.InvalidTopicException) || closed != nil {
		t.Fatalf("closed %v, %v; want the topic's error", closed, err)
	}

	// Not created yet.
	ids, pids, epochs, before, f = chaosCase()
	before[1] = txnBefore{state: "CompleteAbort", pid: 33, epoch: 672}
	if closed, err := closeHanging(context.Background(), slog.New(slog.DiscardHandler), f, firstEpochsOf(f), nil, []string{"new-output"}, ids, pids, epochs, before); err != nil || closed != nil || f.described != 0 {
		t.Fatalf("closed %v, %v, %d DescribeProducers; want nothing asked", closed, err, f.described)
	}
}

// A job that writes two topics: the ended transaction's partitions are no
// longer named, and its skipped marker is on the second topic. Only asking
// every topic the sink writes finds it.
func TestCloseHangingAsksEveryTopic(t *testing.T) {
	ids, pids, epochs, before, f := chaosCase()
	before[1] = txnBefore{state: "CompleteCommit", pid: 33, epoch: 672}
	f.open["rejects"] = map[int32][]kadm.DescribedProducer{0: f.open["out"][1][:1]}
	f.open["rejects"][0][0].Topic, f.open["rejects"][0][0].Partition = "rejects", 0
	f.open["out"] = nil
	closed, err := closeHanging(context.Background(), slog.New(slog.DiscardHandler), f, firstEpochsOf(f), nil, []string{"out"}, ids, pids, epochs, before)
	if err != nil || len(closed) != 0 {
		t.Fatalf("asking out only: closed %v, %v", closed, err)
	}
	closed, err = closeHanging(context.Background(), slog.New(slog.DiscardHandler), f, firstEpochsOf(f), nil, []string{"out", "rejects"}, ids, pids, epochs, before)
	if err != nil {
		t.Fatal(err)
	}
	if len(closed) != 1 || closed[0].topic != "rejects" || !closed[0].commit || len(f.written) != 1 || !f.written[0].Topics.Lookup("rejects", 0) {
		t.Fatalf("closed %+v, markers %+v: want the commit marker of rejects/0", closed, f.written)
	}
}

// A writer that writes a topic its Config does not name says so, once: the
// start-up check does not ask that topic.
func TestWriterWarnsOfUncheckedTopic(t *testing.T) {
	var logs strings.Builder
	w := &txnWriter[string]{cfg: Config[string]{Topic: "out", Topics: []string{"rejects"}}, log: slog.New(slog.NewTextHandler(&logs, nil))}
	for range 2 {
		for _, topic := range []string{"out", "rejects", "audit", "out", "audit"} {
			w.noteTopic(topic)
		}
		w.topics = w.topics[:0] // the next transaction
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 || !strings.Contains(logs.String(), "topic=audit") {
		t.Fatalf("%d warnings, want one for audit:\n%s", n, logs.String())
	}
}

// rawTxnBatch is a record batch of one record with value v, written as
// producer pid at epoch inside a transaction, as a producer's client
// encodes one.
func rawTxnBatch(pid int64, epoch int16, v []byte) []byte {
	now := time.Now().UnixMilli()
	r := kmsg.Record{Value: v}
	r.Length = int32(len(r.AppendTo(nil)) - 1)
	recs := r.AppendTo(nil)
	b := kmsg.RecordBatch{Length: int32(49 + len(recs)), Magic: 2, Attributes: 0x10, FirstTimestamp: now, MaxTimestamp: now,
		ProducerID: pid, ProducerEpoch: epoch, FirstSequence: 0, NumRecords: 1, Records: recs}
	raw := b.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[17:21], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}

// TestHangingTransactionOnRealBroker makes on a real broker what the chaos
// run met: a partition holding a transaction open that its coordinator
// ended without that partition's marker. A broker without transaction
// verification appends a transactional batch the coordinator never heard
// of (here, to partition 1 while the transaction wrote partition 0); its
// commit writes partition 0's marker only. The next writer of that
// transactional id must close it (its coordinator committed the epoch's
// transaction) before writing, and must refuse to write when its record
// does not tell (the batch written after the commit, at the next
// transaction's epoch).
func TestHangingTransactionOnRealBroker(t *testing.T) {
	c := testcluster.KafkaWith(t, map[string]string{"transaction.partition.verification.enable": "false"})
	plain := c.Client(t)
	adm := kadm.NewClient(plain)
	for _, tc := range []struct {
		name string
		// older: another transaction of the id commits after the one the
		// stray batch joined, so that the coordinator's record no longer
		// tells that one's outcome.
		older bool
		// merged: the id's next transaction writes the partition and is
		// left open, continuing the hanging one (see merged.go).
		merged bool
		// second: the stray batch is on the sink's second topic (a job
		// with two writes), which the coordinator no longer names.
		second bool
	}{{"closed", false, false, false}, {"refused", true, false, false}, {"merged", false, true, false}, {"second topic", false, false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctx(t)
			topic, prefix := testcluster.UniqueName(t, "out"), testcluster.UniqueName(t, "txn")
			c.CreateTopics(t, 2, topic)
			strayTopic := topic
			if tc.second {
				strayTopic = testcluster.UniqueName(t, "rejects")
				c.CreateTopics(t, 2, strayTopic)
			}
			cfg := Config[string]{Brokers: c.Brokers, Topic: topic, TransactionalIDPrefix: prefix, TransactionTimeout: time.Minute,
				Encode:     func(s string) (*kgo.Record, error) { return &kgo.Record{Value: []byte(s), Partition: 0}, nil },
				ClientOpts: []kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner())}}
			id := TransactionalIDs(prefix, 0, cfg.poolSize())[0]
			if tc.second {
				cfg.Topics = []string{strayTopic}
			}
			td, err := adm.ListTopics(ctx, strayTopic)
			if err != nil {
				t.Fatal(err)
			}
			topicID := td[strayTopic].ID
			prev, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.TransactionalID(id), kgo.DefaultProduceTopic(topic),
				kgo.RecordPartitioner(kgo.ManualPartitioner()))
			if err != nil {
				t.Fatal(err)
			}
			defer prev.Close()
			if err := prev.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			if err := prev.ProduceSync(ctx, &kgo.Record{Value: []byte("in the transaction"), Partition: 0}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			pid, epoch, err := prev.ProducerID(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// What Close asks before it aborts an open transaction.
			abortable := func() (bool, error) {
				t.Helper()
				w := &txnWriter[string]{cfg: cfg, log: slog.New(slog.NewTextHandler(testWriter{t}, nil)),
					ids: []string{id}, clients: []*kgo.Client{prev}, cur: 0, topics: []string{topic}}
				return w.abortable(ctx)
			}
			if ok, err := abortable(); !ok || err != nil {
				t.Fatalf("Close would not abort a transaction that continues no other (%v)", err)
			}
			// Produce below version 12 carries no transaction version 2,
			// so the broker does not add the partition to the transaction
			// itself; and it verifies nothing with the coordinator.
			old, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.MaxVersions(kversion.V3_7_0()))
			if err != nil {
				t.Fatal(err)
			}
			defer old.Close()
			stray := func(epoch int16) {
				t.Helper()
				req := kmsg.NewPtrProduceRequest()
				req.TransactionID, req.Acks, req.TimeoutMillis = &id, -1, 10_000
				rt := kmsg.NewProduceRequestTopic()
				rt.Topic, rt.TopicID = strayTopic, topicID
				rp := kmsg.NewProduceRequestTopicPartition()
				rp.Partition, rp.Records = 1, rawTxnBatch(pid, epoch, []byte("stray"))
				rt.Partitions = append(rt.Partitions, rp)
				req.Topics = append(req.Topics, rt)
				resp, err := req.RequestWith(ctx, old)
				if err == nil {
					err = kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode)
				}
				if err != nil {
					t.Fatalf("the stray batch was refused (a broker that verifies transactional produce?): %v", err)
				}
			}
			stray(epoch)
			if err := prev.EndTransaction(ctx, kgo.TryCommit); err != nil {
				t.Fatal(err)
			}
			if tc.older {
				if err := prev.BeginTransaction(); err != nil {
					t.Fatal(err)
				}
				if err := prev.ProduceSync(ctx, &kgo.Record{Value: []byte("a later transaction"), Partition: 0}).FirstErr(); err != nil {
					t.Fatal(err)
				}
				if err := prev.EndTransaction(ctx, kgo.TryCommit); err != nil {
					t.Fatal(err)
				}
			}
			// Every marker the coordinator writes is in once it has the
			// transaction complete.
			eventually(t, 30*time.Second, "the transactions to complete", func() bool {
				dt, err := adm.DescribeTransactions(ctx, id)
				return err == nil && dt[id].State == "CompleteCommit"
			})
			open := func() int64 {
				t.Helper()
				// A topic made a moment ago may not be known yet to the
				// partition's broker: asked again, as Close asks.
				wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				ds, err := describeWaiting(wctx, slog.New(slog.NewTextHandler(testWriter{t}, nil)), adm, kadm.TopicsSet{strayTopic: {1: {}}})
				if err != nil {
					t.Fatal(err)
				}
				start := int64(-1)
				for _, d := range ds {
					if d.ProducerID == pid {
						start = d.CurrentTxnStartOffset
					}
				}
				return start
			}
			if open() < 0 {
				t.Fatalf("%s/1 holds no transaction of producer id %d open: the test made no hanging transaction", strayTopic, pid)
			}
			var closeHold string // the hold Close's failure names
			if tc.merged {
				if err := prev.BeginTransaction(); err != nil {
					t.Fatal(err)
				}
				// Written elsewhere only, the open transaction continues
				// nothing: the older range on partition 1 is one whose
				// marker is late (as after a broker restart), which an
				// abort of this one does not touch.
				if err := prev.ProduceSync(ctx, &kgo.Record{Value: []byte("the next transaction, elsewhere"), Partition: 0}).FirstErr(); err != nil {
					t.Fatal(err)
				}
				if ok, err := abortable(); !ok || err != nil {
					t.Fatalf("Close would not abort a transaction that wrote only partition 0, for a range it did not write (%v)", err)
				}
				if err := prev.ProduceSync(ctx, &kgo.Record{Value: []byte("the next transaction"), Partition: 1}).FirstErr(); err != nil {
					t.Fatal(err)
				}
				ok, err := abortable()
				if ok {
					t.Fatal("Close would abort the open transaction, and the committed stray record with it")
				}
				// Close fails with the error that holds the task
				// (engine.Holding): nothing else would outlast the timeout.
				var me *MergedTransactionError
				if !errors.As(err, &me) || !strings.HasPrefix(me.HoldName(), "merged-transaction-") {
					t.Fatalf("Close leaves the merged range open but fails with %v, not a *MergedTransactionError", err)
				}
				if me.Deadline.IsZero() || !strings.Contains(err.Error(), "Copy them before") {
					t.Errorf("Close's error gives no deadline: %v", err)
				}
				closeHold = me.HoldName()
				// Restore, walking back past a checkpoint that named the
				// open transaction, would abort it too.
				_, nextEpoch, err := prev.ProducerID(ctx)
				if err != nil {
					t.Fatal(err)
				}
				// The batches of the two transactions on the partition,
				// read in one call: each offset gets its own batch's epoch.
				got, err := readFirstEpochs([]kgo.Opt{kgo.SeedBrokers(c.Brokers...)})(ctx, []batchAt{{topic, 1, 0}, {topic, 1, 1}, {topic, 0, 0}})
				if want := map[batchAt]int16{{topic, 1, 0}: epoch, {topic, 1, 1}: nextEpoch, {topic, 0, 0}: epoch}; err != nil || !maps.Equal(got, want) {
					t.Fatalf("first epochs %v, %v; want %v", got, err, want)
				}
				_, err = Abort(ctx, plain, nil, []checkpoint.Committable{{Operator: "out", TransactionalID: id, ProducerID: pid, Epoch: nextEpoch}})
				if me := (*MergedTransactionError)(nil); !errors.As(err, &me) {
					t.Fatalf("Abort: %v; want a MergedTransactionError", err)
				}
			}
			prev.Close()

			f, err := Kafka(cfg)
			if err != nil {
				t.Fatal(err)
			}
			info := engine.TaskInfo{Job: "job", Task: 0, Operator: "out", Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))}
			w, err := f.Open(ctx, info, nil)
			if tc.merged {
				var me *MergedTransactionError
				if !errors.As(err, &me) || !strings.Contains(err.Error(), fmt.Sprintf("%s/1 from offset", topic)) {
					t.Fatalf("open: %v; want a MergedTransactionError naming %s/1", err, topic)
				}
				// By when to act: the open transaction's start plus its
				// timeout (franz-go's default, 40 s), as its coordinator
				// tells.
				if now := time.Now(); me.Deadline.Before(now) || me.Deadline.After(now.Add(time.Minute)) || !strings.Contains(err.Error(), "Copy them before") {
					t.Errorf("deadline %v (now %v): want the open transaction's timeout, within a minute", me.Deadline, now)
				}
				// The same ranges, the same hold: a start after the close
				// does not hold the task twice for one failure.
				if me.HoldName() != closeHold {
					t.Errorf("open's hold %s, Close's %s: want one", me.HoldName(), closeHold)
				}
				if open() < 0 {
					t.Fatal("the merged transaction was ended anyway")
				}
				dt, err := adm.DescribeTransactions(ctx, id)
				if err != nil || dt[id].State != "Ongoing" {
					t.Fatalf("the coordinator has %s %+v (%v), want it Ongoing: the open transaction was aborted", id, dt[id], err)
				}
				return
			}
			if tc.older {
				var he *HangingTransactionError
				if !errors.As(err, &he) || !strings.Contains(err.Error(), fmt.Sprintf("%s/1 from offset", topic)) {
					t.Fatalf("open: %v; want a HangingTransactionError naming %s/1", err, topic)
				}
				if open() < 0 {
					t.Fatal("the refused transaction was closed anyway")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if s := open(); s >= 0 {
				t.Fatalf("%s/1 still holds producer id %d's transaction open from %d after the writer opened", strayTopic, pid, s)
			}
			// Closed as its coordinator decided, committed: read_committed
			// sees the stray record, and the partition's stable offset moved
			// past it.
			got := consumeCommitted(t, c, strayTopic, 1)
			if len(got) != 1 || got[0] != "stray" {
				t.Fatalf("read_committed %s/1: %q, want the committed stray record", strayTopic, got)
			}
		})
	}
}

// consumeCommitted is what a read_committed reader sees of topic's
// partition p, up to a sentinel it writes there first (outside any
// transaction): every transaction on the partition must have ended, or
// the sentinel never becomes visible.
func consumeCommitted(t *testing.T, c *testcluster.Cluster, topic string, p int32) []string {
	t.Helper()
	ctx := ctx(t)
	sentinel := "sentinel-" + testcluster.UniqueName(t, "")
	w := c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := w.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte(sentinel)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl := c.Client(t, kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().AtStart()}}))
	var out []string
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("reading %s/%d read_committed, got %v so far: %v", topic, p, out, err)
		}
		for _, r := range fs.Records() {
			if v := string(r.Value); v == sentinel {
				return out
			} else if !strings.HasPrefix(v, "sentinel-") {
				out = append(out, v)
			}
		}
	}
}

// TestCloseHangingMergedRangeHolds: out/1's open range began with a
// transaction at epoch 670 whose commit marker was skipped, and the
// slot's transaction at 671, whose abort marker was skipped too, continued
// it. DescribeProducers tells the newest batch's epoch, 671, which the
// record decides aborted; one abort marker would end the whole range, the
// committed records of 670 with it. The start reads the range's first
// batch and holds the task instead, writing nothing.
func TestCloseHangingMergedRangeHolds(t *testing.T) {
	ids, pids, epochs, _, f := chaosCase()
	before := map[int]txnBefore{1: {state: "CompleteAbort", pid: 33, epoch: 672}}
	var asked []batchAt
	first := fakeFirstEpochs(map[batchAt]int16{{"out", 1, 33727}: 670}, &asked)
	closed, err := closeHanging(context.Background(), slog.New(slog.DiscardHandler), f, first, nil, []string{"out"}, ids, pids, epochs, before)
	var me *MergedTransactionError
	if !errors.As(err, &me) || len(me.Merged) != 1 || !strings.Contains(me.Merged[0], "out/1 from offset 33727") || !strings.Contains(me.Merged[0], "epoch 670") {
		t.Fatalf("closed %v, %v; want a MergedTransactionError naming out/1 from 33727, epoch 670 then 671", closed, err)
	}
	if len(f.written) != 0 {
		t.Errorf("markers written %+v, want none", f.written)
	}
	if !slices.Equal(asked, []batchAt{{"out", 1, 33727}}) {
		t.Errorf("first batches read at %v, want out/1 at 33727", asked)
	}
	// Not merged: the first batch is the newest's epoch, and the abort is
	// written.
	ids, pids, epochs, _, f = chaosCase()
	if closed, err := closeHanging(context.Background(), slog.New(slog.DiscardHandler), f, firstEpochsOf(f), nil, []string{"out"}, ids, pids, epochs, before); err != nil || len(closed) != 1 {
		t.Fatalf("closed %v, %v; want out/1 aborted", closed, err)
	}
}
