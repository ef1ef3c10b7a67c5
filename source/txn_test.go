package source_test

import (
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/internal/testcluster"
	"github.com/weirstream/weir/source"
)

// txnProducer writes transactions, committed or aborted, to partition 0.
type txnProducer struct {
	t  *testing.T
	cl *kgo.Client
}

func newTxnProducer(t *testing.T, c *testcluster.Cluster) *txnProducer {
	return &txnProducer{t: t, cl: producer(t, c, kgo.TransactionalID(testcluster.UniqueName(t, "tx")))}
}

func (p *txnProducer) begin(topic string, vals ...string) {
	p.t.Helper()
	if err := p.cl.BeginTransaction(); err != nil {
		p.t.Fatalf("begin transaction: %v", err)
	}
	produce(p.t, p.cl, topic, 0, vals...)
}

func (p *txnProducer) end(commit bool) {
	p.t.Helper()
	if err := p.cl.EndTransaction(testCtx(p.t), kgo.TransactionEndTry(commit)); err != nil {
		p.t.Fatalf("end transaction (commit %v): %v", commit, err)
	}
}

// TestTransactionsResumeExactly reads a partition that interleaves committed
// and aborted transactions and plain records, restarting the reader from its
// positions after every poll, as a task restarted after each checkpoint
// would. Offsets of returned records skip transaction markers and aborted
// batches; resuming from "last returned + 1" must neither repeat nor lose a
// record.
func TestTransactionsResumeExactly(t *testing.T) {
	c := testcluster.Kafka(t)
	topic := testcluster.UniqueName(t, "in")
	createTopics(t, c, 2, topic)
	tx := newTxnProducer(t, c)
	plain := producer(t, c)

	var want []string
	txn := func(commit bool, vals ...string) {
		tx.begin(topic, vals...)
		tx.end(commit)
		if commit {
			want = append(want, vals...)
		}
	}
	txn(true, "c0", "c1", "c2")
	txn(false, "x0", "x1")
	txn(true, "c3")
	produce(t, plain, topic, 0, "p0", "p1")
	want = append(want, "p0", "p1")
	txn(false, "x2")
	txn(true, "c4", "c5", "c6", "c7")
	txn(false, "x3", "x4") // an aborted tail: the last position stays before it
	produce(t, plain, topic, 1, "other partition")

	cfg := source.Config[string]{Brokers: c.Brokers, Topics: []string{topic}, Decode: str, MaxPollRecords: 2}
	var (
		got     []string
		offsets []int64
		saved   []checkpoint.SourcePosition
	)
	deadline := time.Now().Add(waitFor)
	for len(got) < len(want) {
		if time.Now().After(deadline) {
			t.Fatalf("got %v within %v, want %v", got, waitFor, want)
		}
		r := openReader(t, cfg, 0, saved)
		var b engine.Batch[string]
		for b.Len() == 0 && time.Now().Before(deadline) {
			if err := r.Poll(testCtx(t), &b); err != nil {
				t.Fatalf("poll after %v: %v", got, err)
			}
		}
		for i, v := range b.Values {
			got = append(got, v)
			offsets = append(offsets, b.Positions[i].Offset)
		}
		saved = r.Positions()
		if n := b.Len(); n > 0 && saved[0].Offset != b.Positions[n-1].Offset+1 {
			t.Fatalf("position %d after a batch ending at offset %d", saved[0].Offset, b.Positions[n-1].Offset)
		}
		r.Close()
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if !slices.IsSorted(offsets) || offsets[len(offsets)-1]-offsets[0] == int64(len(offsets)-1) {
		t.Fatalf("offsets %v: want increasing and not contiguous (markers, aborted records)", offsets)
	}
	t.Logf("offsets of committed records: %v", offsets)

	// Resuming after the last committed record skips the aborted tail.
	r := openReader(t, cfg, 0, saved)
	assertQuiet(t, r)
	if pos := r.Positions()[0].Offset; pos != offsets[len(offsets)-1]+1 {
		t.Fatalf("position %d, want %d", pos, offsets[len(offsets)-1]+1)
	}
	ends, err := c.Admin(t).ListEndOffsets(testCtx(t), topic)
	if err != nil {
		t.Fatal(err)
	}
	if end, _ := ends.Lookup(topic, 0); end.Offset <= saved[0].Offset {
		t.Fatalf("end offset %d, position %d: the aborted tail should lie between", end.Offset, saved[0].Offset)
	}

	// Records committed later, after the aborted tail, come next.
	txn(true, "c8")
	if got := drain(t, r, 1).Values; !slices.Equal(got, []string{"c8"}) {
		t.Fatalf("after the aborted tail: got %v, want [c8]", got)
	}
}

// TestStartLatestSeesOpenTransaction: "latest" is the last stable offset, so
// a transaction open when the reader starts is delivered once it commits.
func TestStartLatestSeesOpenTransaction(t *testing.T) {
	c := testcluster.Kafka(t)
	topic := testcluster.UniqueName(t, "in")
	createTopics(t, c, 1, topic)
	produce(t, producer(t, c), topic, 0, "old")
	tx := newTxnProducer(t, c)
	tx.begin(topic, "open0", "open1")

	r := openReader(t, source.Config[string]{Brokers: c.Brokers, Topics: []string{topic}, Decode: str, Start: source.StartLatest}, 0, nil)
	if pos := r.Positions()[0].Offset; pos != 1 {
		t.Fatalf("start position %d, want 1 (the last stable offset)", pos)
	}
	var b engine.Batch[string]
	if err := r.Poll(testCtx(t), &b); err != nil || b.Len() != 0 {
		t.Fatalf("poll during the open transaction: %v, %v", b.Values, err)
	}
	tx.end(true)
	if got := drain(t, r, 2).Values; !slices.Equal(got, []string{"open0", "open1"}) {
		t.Fatalf("got %v, want the transaction's records", got)
	}
}
