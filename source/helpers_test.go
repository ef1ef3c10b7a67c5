package source_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/internal/testcluster"
	"github.com/weirstream/weir/source"
)

// shared, when set, is the Consumers the readers of a test share (see
// TestSharedConsumer); nil, each reader has a client of its own.
var shared *source.Consumers

// waitFor bounds every wait on Kafka in these tests.
const waitFor = 30 * time.Second

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// createTopics creates topics and waits until the broker's metadata shows
// them: on a real broker CreateTopics returns before every broker's metadata
// knows the topic, and a reader opening then would see UNKNOWN_TOPIC.
func createTopics(t *testing.T, c *testcluster.Cluster, partitions int32, topics ...string) {
	t.Helper()
	c.CreateTopics(t, partitions, topics...)
	adm := c.Admin(t)
	deadline := time.Now().Add(waitFor)
	for {
		tds, err := adm.ListTopics(testCtx(t), topics...)
		ready := err == nil
		for _, topic := range topics {
			td, ok := tds[topic]
			ready = ready && ok && td.Err == nil && len(td.Partitions) == int(partitions)
		}
		if ready {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("topics %v not in metadata within %v: %v", topics, waitFor, err)
		}
	}
}

// str decodes a record's value as a string.
func str(r *kgo.Record) (string, error) { return string(r.Value), nil }

// atoi decodes a record's value as a decimal int.
func atoi(r *kgo.Record) (int, error) { return strconv.Atoi(string(r.Value)) }

// producer returns a client that produces to the partition a record names.
func producer(t *testing.T, c *testcluster.Cluster, opts ...kgo.Opt) *kgo.Client {
	return c.Client(t, append([]kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
}

// produce writes values to topic/partition and returns their offsets.
func produce(t *testing.T, cl *kgo.Client, topic string, partition int32, values ...string) []int64 {
	t.Helper()
	rs := make([]*kgo.Record, len(values))
	for i, v := range values {
		rs[i] = &kgo.Record{Topic: topic, Partition: partition, Value: []byte(v)}
	}
	return produceRecords(t, cl, rs...)
}

func produceRecords(t *testing.T, cl *kgo.Client, rs ...*kgo.Record) []int64 {
	t.Helper()
	res := cl.ProduceSync(testCtx(t), rs...)
	if err := res.FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	offs := make([]int64, len(res))
	for i, r := range res {
		offs[i] = r.Record.Offset
	}
	return offs
}

func values(prefix string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s%d", prefix, i))
	}
	return out
}

// openReader opens task's reader of cfg.
func openReader[T any](t *testing.T, cfg source.Config[T], task int, restored []checkpoint.SourcePosition) engine.SourceReader[T] {
	t.Helper()
	r, err := openReaderErr(t, cfg, task, restored)
	if err != nil {
		t.Fatalf("open reader for task %d: %v", task, err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func openReaderErr[T any](t *testing.T, cfg source.Config[T], task int, restored []checkpoint.SourcePosition) (engine.SourceReader[T], error) {
	t.Helper()
	if cfg.Consumers == nil {
		cfg.Consumers = shared
	}
	f, err := source.Kafka(cfg)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return f(testCtx(t), engine.TaskInfo{Job: "job", Task: task, Operator: "src"}, restored)
}

// drain polls r until it returned n records in all, failing t at the
// deadline or if a poll fails.
func drain[T any](t *testing.T, r engine.SourceReader[T], n int) engine.Batch[T] {
	t.Helper()
	var all engine.Batch[T]
	deadline := time.Now().Add(waitFor)
	for all.Len() < n {
		if time.Now().After(deadline) {
			t.Fatalf("got %d of %d records within %v: %v", all.Len(), n, waitFor, all.Values)
		}
		var b engine.Batch[T]
		if err := r.Poll(testCtx(t), &b); err != nil {
			t.Fatalf("poll after %d records: %v", all.Len(), err)
		}
		for i := range b.Values {
			all.Add(b.Values[i], b.Positions[i])
		}
	}
	if all.Len() > n {
		t.Fatalf("got %d records, want %d: %v", all.Len(), n, all.Values)
	}
	return all
}

// assertQuiet polls a few times and fails if a record comes: used after a
// reader returned all records produced, to catch duplicates.
func assertQuiet[T any](t *testing.T, r engine.SourceReader[T]) {
	t.Helper()
	for range 3 {
		var b engine.Batch[T]
		if err := r.Poll(testCtx(t), &b); err != nil {
			t.Fatalf("poll: %v", err)
		}
		if b.Len() > 0 {
			t.Fatalf("unexpected records %v at %v", b.Values, b.Positions)
		}
	}
}

// positionsOf indexes positions by topic, checking they are all of partition.
func positionsOf(t *testing.T, ps []checkpoint.SourcePosition, partition int32) map[string]int64 {
	t.Helper()
	out := make(map[string]int64)
	for _, p := range ps {
		if p.Partition != partition || p.Source != "src" {
			t.Fatalf("position %+v: want source src, partition %d", p, partition)
		}
		out[p.Topic] = p.Offset
	}
	return out
}
