package integration

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/examples/orders"
	"github.com/weirstream/weir/internal/testcluster"
)

// TestOrdersAcrossWorkers: the orders example joins two topics and writes
// two (paid orders, rejected payments), each task's output of a checkpoint
// in one transaction. Three workers share the tasks; while orders and
// payments are written one is killed with SIGKILL. Every order must be
// paid once or not at all as its payments say, every payment that pays
// nothing rejected once: exactly once on both outputs.
func TestOrdersAcrossWorkers(t *testing.T) {
	c := testcluster.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	const partitions, n = 4, 4000
	topics := map[string]string{}
	for _, name := range []string{orders.OrdersTopic, orders.PaymentsTopic, orders.PaidTopic, orders.RejectsTopic} {
		topics[name] = testcluster.UniqueName(t, name)
		c.CreateTopics(t, partitions, topics[name])
	}
	ps := newProcs(t)
	jobName := testcluster.UniqueName(t, "orders")
	checkpoints, stateRoot := t.TempDir(), t.TempDir()
	var pairs []string
	for name, topic := range topics {
		pairs = append(pairs, name+"="+topic)
	}
	run := func(name string) *proc {
		args := append([]string{"run", "--job", "orders", "--name", jobName,
			"--brokers", strings.Join(c.Brokers, ","), "--topic", strings.Join(pairs, ","),
			"--checkpoints", "file://" + checkpoints, "--state-dir", filepath.Join(stateRoot, name),
			"--http-addr", "127.0.0.1:0"}, groupFlags...)
		return ps.start(name, args...)
	}

	// Order i costs 100+i. Its payment p<i> pays it, but for every tenth
	// order, whose payment is one too much; every seventh order gets a
	// second payment q<i> of its amount.
	wantPaid, wantRejects := map[string]string{}, map[string]bool{}
	for i := range n {
		id := "o" + strconv.Itoa(i)
		switch {
		case i%10 == 0 && i%7 == 0:
			wantPaid[id], wantRejects["p"+id] = "q"+id, true
		case i%10 == 0:
			wantRejects["p"+id] = true
		case i%7 == 0:
			wantPaid[id], wantRejects["q"+id] = "p"+id, true
		default:
			wantPaid[id] = "p" + id
		}
	}
	producer := c.Client(t)
	write := func(from, to int) {
		t.Helper()
		var recs []*kgo.Record
		add := func(topic, key string, v any) {
			b, _ := json.Marshal(v)
			recs = append(recs, &kgo.Record{Topic: topics[topic], Key: []byte(key), Value: b})
		}
		for i := from; i < to; i++ {
			id := "o" + strconv.Itoa(i)
			amount := int64(100 + i)
			// Payments before their order half the time.
			if i%2 == 0 {
				add(orders.OrdersTopic, id, orders.Order{ID: id, Customer: "c" + strconv.Itoa(i%13), Amount: amount})
			}
			pay := amount
			if i%10 == 0 {
				pay++
			}
			add(orders.PaymentsTopic, id, orders.Payment{ID: "p" + id, Order: id, Amount: pay})
			if i%7 == 0 {
				add(orders.PaymentsTopic, id, orders.Payment{ID: "q" + id, Order: id, Amount: amount})
			}
			if i%2 == 1 {
				add(orders.OrdersTopic, id, orders.Order{ID: id, Customer: "c" + strconv.Itoa(i%13), Amount: amount})
			}
		}
		if err := producer.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("write orders and payments: %v", err)
		}
	}

	workers := []*proc{run("w1"), run("w2"), run("w3")}
	addrs := map[*proc]string{}
	for _, w := range workers {
		addrs[w] = httpAddr(ctx, t, w)
	}
	waitEachTaskOnce(ctx, t, workers, addrs, partitions, 90*time.Second)
	for from := 0; from < n/2; from += 200 {
		write(from, from+200)
		time.Sleep(50 * time.Millisecond)
	}
	// A worker dies with its tasks' transactions open, on both outputs.
	workers[0].Kill9()
	for from := n / 2; from < n; from += 200 {
		write(from, from+200)
		time.Sleep(50 * time.Millisecond)
	}
	live := workers[1:]
	waitEachTaskOnce(ctx, t, live, addrs, partitions, 90*time.Second)

	// Both outputs, read_committed, until each has what it should.
	paid := readJSON[orders.Paid](ctx, t, c, topics[orders.PaidTopic], len(wantPaid))
	rejects := readJSON[orders.Reject](ctx, t, c, topics[orders.RejectsTopic], len(wantRejects))
	for _, w := range live {
		if err, graceful := w.Terminate(60 * time.Second); err != nil || !graceful {
			t.Errorf("%s on SIGTERM: %v", w.name, err)
		}
	}
	// Once no worker runs, read both to their ends: nothing more, nothing twice.
	paid = readToEnd[orders.Paid](ctx, t, c, topics[orders.PaidTopic], partitions)
	rejects = readToEnd[orders.Reject](ctx, t, c, topics[orders.RejectsTopic], partitions)

	gotPaid := map[string]string{}
	dupPaid, wrongPaid := 0, 0
	for _, p := range paid {
		if _, twice := gotPaid[p.Order]; twice {
			dupPaid++
		}
		gotPaid[p.Order] = p.Payment
		if wantPaid[p.Order] != p.Payment {
			wrongPaid++
		}
	}
	gotRejects := map[string]bool{}
	dupRejects, wrongRejects := 0, 0
	for _, r := range rejects {
		if gotRejects[r.Payment] {
			dupRejects++
		}
		gotRejects[r.Payment] = true
		if !wantRejects[r.Payment] {
			wrongRejects++
		}
	}
	t.Logf("paid: %d records, %d orders of %d, %d duplicates, %d wrong; rejects: %d records, %d payments of %d, %d duplicates, %d wrong",
		len(paid), len(gotPaid), len(wantPaid), dupPaid, wrongPaid, len(rejects), len(gotRejects), len(wantRejects), dupRejects, wrongRejects)
	if dupPaid+wrongPaid+dupRejects+wrongRejects > 0 || len(gotPaid) != len(wantPaid) || len(gotRejects) != len(wantRejects) {
		t.Fatal("the orders job is not exactly once on both outputs")
	}
}

// readJSON reads topic read_committed from its start until it has want
// records, and returns them decoded.
func readJSON[T any](ctx context.Context, t *testing.T, c *testcluster.Cluster, topic string, want int) []T {
	t.Helper()
	cl := c.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	defer cl.Close()
	var out []T
	for len(out) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s: %d of %d records: %v", topic, len(out), want, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			var v T
			if err := json.Unmarshal(r.Value, &v); err != nil {
				t.Errorf("%s/%d@%d: %v", topic, r.Partition, r.Offset, err)
			}
			out = append(out, v)
		})
	}
	return out
}

// readToEnd writes an end record into every partition of topic in a
// transaction, then reads the topic read_committed from its start to the
// end records: every transaction before them has ended, so what it
// returns is all the topic will ever hold before them.
func readToEnd[T any](ctx context.Context, t *testing.T, c *testcluster.Cluster, topic string, partitions int32) []T {
	t.Helper()
	p := c.Client(t, kgo.TransactionalID(testcluster.UniqueName(t, "end")), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for part := range partitions {
		if err := p.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: part, Key: []byte(endKey)}).FirstErr(); err != nil {
			t.Fatalf("end record to %s/%d: %v", topic, part, err)
		}
	}
	if err := p.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("commit end records: %v", err)
	}
	cl := c.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	defer cl.Close()
	var out []T
	ends := map[int32]bool{}
	for len(ends) < int(partitions) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s: end records on %d of %d partitions: %v", topic, len(ends), partitions, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Key) == endKey {
				ends[r.Partition] = true
				return
			}
			if ends[r.Partition] {
				return
			}
			var v T
			if err := json.Unmarshal(r.Value, &v); err != nil {
				t.Errorf("%s/%d@%d: %v", topic, r.Partition, r.Offset, err)
			}
			out = append(out, v)
		})
	}
	return out
}
