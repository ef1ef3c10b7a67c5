package source_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/internal/testcluster"
	"github.com/weirstream/weir/source"
)

func TestReadsOnlyItsPartition(t *testing.T) {
	c := testcluster.Kafka(t)
	a, b := testcluster.UniqueName(t, "a"), testcluster.UniqueName(t, "b")
	createTopics(t, c, 3, a, b)
	pr := producer(t, c)
	for p := range int32(3) {
		produce(t, pr, a, p, values(fmt.Sprintf("a%d-", p), 0, 4)...)
		produce(t, pr, b, p, values(fmt.Sprintf("b%d-", p), 0, 2)...)
	}

	r := openReader(t, source.Config[string]{Brokers: c.Brokers, Topics: []string{a, b}, Decode: str}, 1, nil)
	got := drain(t, r, 6)
	assertQuiet(t, r)

	byTopic := map[string][]string{}
	for i, v := range got.Values {
		pos := got.Positions[i]
		if pos.Partition != 1 || pos.Source != "src" {
			t.Fatalf("record %q at %v: want source src, partition 1", v, pos)
		}
		byTopic[pos.Topic] = append(byTopic[pos.Topic], v)
	}
	if want := values("a1-", 0, 4); !slices.Equal(byTopic[a], want) {
		t.Errorf("topic a: got %v, want %v", byTopic[a], want)
	}
	if want := values("b1-", 0, 2); !slices.Equal(byTopic[b], want) {
		t.Errorf("topic b: got %v, want %v", byTopic[b], want)
	}
	pos := positionsOf(t, r.Positions(), 1)
	if pos[a] != 4 || pos[b] != 2 || len(pos) != 2 {
		t.Errorf("positions %v, want %s=4 %s=2", pos, a, b)
	}
}

// TestPositionsFollowPoll caps a poll's size so franz-go buffers more than
// Poll returns: positions must follow what was returned, and what stayed
// buffered must come with the next polls.
func TestPositionsFollowPoll(t *testing.T) {
	c := testcluster.Kafka(t)
	topic := testcluster.UniqueName(t, "in")
	createTopics(t, c, 1, topic)
	produce(t, producer(t, c), topic, 0, values("v", 0, 10)...)

	r := openReader(t, source.Config[string]{Brokers: c.Brokers, Topics: []string{topic}, Decode: str, MaxPollRecords: 3}, 0, nil)
	var seen []string
	deadline := time.Now().Add(waitFor)
	for len(seen) < 10 {
		if time.Now().After(deadline) {
			t.Fatalf("got %v within %v", seen, waitFor)
		}
		var b engine.Batch[string]
		if err := r.Poll(testCtx(t), &b); err != nil {
			t.Fatal(err)
		}
		if b.Len() > 3 {
			t.Fatalf("poll returned %d records, MaxPollRecords is 3", b.Len())
		}
		seen = append(seen, b.Values...)
		want := int64(len(seen))
		if got := r.Positions()[0].Offset; got != want {
			t.Fatalf("after %d records: position %d, want %d", len(seen), got, want)
		}
	}
	if want := values("v", 0, 10); !slices.Equal(seen, want) {
		t.Fatalf("got %v, want %v", seen, want)
	}
	assertQuiet(t, r)
}

// TestRestoreResumesExactly stops a reader mid-stream and resumes another
// from its positions: every record comes once, in order.
func TestRestoreResumesExactly(t *testing.T) {
	c := testcluster.Kafka(t)
	a, b := testcluster.UniqueName(t, "a"), testcluster.UniqueName(t, "b")
	createTopics(t, c, 2, a, b)
	pr := producer(t, c)
	produce(t, pr, a, 0, values("a", 0, 20)...)
	produce(t, pr, b, 0, values("b", 0, 5)...)
	cfg := source.Config[string]{Brokers: c.Brokers, Topics: []string{a, b}, Decode: str, MaxPollRecords: 4}

	var got []string
	r1 := openReader(t, cfg, 0, nil)
	first := drain(t, r1, 4) // one poll's worth or several smaller ones
	got = append(got, first.Values...)
	saved := r1.Positions()
	r1.Close()

	produce(t, pr, a, 0, values("a", 20, 25)...)
	r2 := openReader(t, cfg, 0, saved)
	if pos := r2.Positions(); !reflect.DeepEqual(pos, saved) {
		t.Fatalf("restored reader positions %v, want %v", pos, saved)
	}
	got = append(got, drain(t, r2, 30-4).Values...)
	assertQuiet(t, r2)

	var ga, gb []string
	for _, v := range got {
		if v[0] == 'a' {
			ga = append(ga, v)
		} else {
			gb = append(gb, v)
		}
	}
	if want := values("a", 0, 25); !slices.Equal(ga, want) {
		t.Errorf("topic a: got %v, want %v", ga, want)
	}
	if want := values("b", 0, 5); !slices.Equal(gb, want) {
		t.Errorf("topic b: got %v, want %v", gb, want)
	}
	if pos := positionsOf(t, r2.Positions(), 0); pos[a] != 25 || pos[b] != 5 {
		t.Errorf("final positions %v, want %s=25 %s=5", pos, a, b)
	}
}

func TestStart(t *testing.T) {
	c := testcluster.Kafka(t)
	topic := testcluster.UniqueName(t, "in")
	createTopics(t, c, 1, topic)
	pr := producer(t, c)
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	for i := range 5 {
		produceRecords(t, pr, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "v%d", i), Timestamp: base.Add(time.Duration(i) * time.Second)})
	}
	cfg := func(s source.Start, at time.Time) source.Config[string] {
		return source.Config[string]{Brokers: c.Brokers, Topics: []string{topic}, Decode: str, Start: s, StartTime: at}
	}

	t.Run("earliest", func(t *testing.T) {
		r := openReader(t, cfg(source.StartEarliest, time.Time{}), 0, nil)
		if got := r.Positions()[0].Offset; got != 0 {
			t.Fatalf("position before poll %d, want 0", got)
		}
		if got := drain(t, r, 5).Values; !slices.Equal(got, values("v", 0, 5)) {
			t.Fatalf("got %v", got)
		}
	})
	t.Run("default is earliest", func(t *testing.T) {
		r := openReader(t, cfg("", time.Time{}), 0, nil)
		if got := drain(t, r, 5).Values; !slices.Equal(got, values("v", 0, 5)) {
			t.Fatalf("got %v", got)
		}
	})
	t.Run("timestamp", func(t *testing.T) {
		r := openReader(t, cfg(source.StartTimestamp, base.Add(2*time.Second)), 0, nil)
		if got := r.Positions()[0].Offset; got != 2 {
			t.Fatalf("position before poll %d, want 2", got)
		}
		if got := drain(t, r, 3).Values; !slices.Equal(got, values("v", 2, 5)) {
			t.Fatalf("got %v", got)
		}
	})
	t.Run("timestamp after the last record", func(t *testing.T) {
		r := openReader(t, cfg(source.StartTimestamp, base.Add(time.Minute)), 0, nil)
		if got := r.Positions()[0].Offset; got != 5 {
			t.Fatalf("position before poll %d, want the end offset 5", got)
		}
	})
	// Last, since it produces more.
	t.Run("latest", func(t *testing.T) {
		r := openReader(t, cfg(source.StartLatest, time.Time{}), 0, nil)
		// Concrete before any record: a checkpoint now pins offset 5.
		saved := r.Positions()
		if saved[0].Offset != 5 {
			t.Fatalf("position before poll %d, want 5", saved[0].Offset)
		}
		produce(t, pr, topic, 0, "v5", "v6")
		if got := drain(t, r, 2).Values; !slices.Equal(got, values("v", 5, 7)) {
			t.Fatalf("got %v", got)
		}
		// A restore from the checkpoint taken before the first record
		// reads from the pinned offset, not from the new end.
		r2 := openReader(t, cfg(source.StartLatest, time.Time{}), 0, saved)
		if got := drain(t, r2, 2).Values; !slices.Equal(got, values("v", 5, 7)) {
			t.Fatalf("restored: got %v", got)
		}
	})
}

func TestPartitionCounts(t *testing.T) {
	c := testcluster.Kafka(t)
	two, three := testcluster.UniqueName(t, "two"), testcluster.UniqueName(t, "three")
	createTopics(t, c, 2, two)
	createTopics(t, c, 3, three)
	ctx := testCtx(t)

	n, err := source.PartitionCount(ctx, c.Brokers, []string{three})
	if err != nil || n != 3 {
		t.Fatalf("PartitionCount(%s) = %d, %v; want 3", three, n, err)
	}

	_, err = source.PartitionCount(ctx, c.Brokers, []string{two, three})
	checkMismatch := func(err error) {
		t.Helper()
		if !errors.Is(err, source.ErrPartitionMismatch) {
			t.Fatalf("got %v, want ErrPartitionMismatch", err)
		}
		for _, s := range []string{two + "=2", three + "=3"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not name %q", err, s)
			}
		}
	}
	checkMismatch(err)
	_, err = openReaderErr(t, source.Config[string]{Brokers: c.Brokers, Topics: []string{two, three}, Decode: str}, 0, nil)
	checkMismatch(err)

	_, err = openReaderErr(t, source.Config[string]{Brokers: c.Brokers, Topics: []string{three}, Decode: str}, 3, nil)
	if err == nil || !strings.Contains(err.Error(), "task 3 has no partition") {
		t.Fatalf("task 3 of a 3-partition topic: got %v", err)
	}

	missing := testcluster.UniqueName(t, "missing")
	_, err = source.PartitionCount(ctx, c.Brokers, []string{three, missing})
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("missing topic: got %v, want an error naming %s", err, missing)
	}
}

func TestRestoredPositionsChecked(t *testing.T) {
	c := testcluster.Kafka(t)
	topic := testcluster.UniqueName(t, "in")
	createTopics(t, c, 2, topic)
	cfg := source.Config[string]{Brokers: c.Brokers, Topics: []string{topic}, Decode: str}

	_, err := openReaderErr(t, cfg, 0, []checkpoint.SourcePosition{{Source: "src", Topic: topic, Partition: 1, Offset: 0}})
	if err == nil || !strings.Contains(err.Error(), "belongs to another task") {
		t.Fatalf("position of partition 1 for task 0: got %v", err)
	}
	// A topic the job no longer reads fails the restore, naming it and the
	// way out; allowed, it is dropped and the others still restore.
	_, err = openReaderErr(t, cfg, 1, []checkpoint.SourcePosition{
		{Source: "src", Topic: "gone", Partition: 1, Offset: 7},
		{Source: "src", Topic: topic, Partition: 1, Offset: 0},
	})
	if !errors.Is(err, engine.ErrIncompatibleCheckpoint) || !strings.Contains(err.Error(), "gone/1@7 is of a topic this source no longer reads") ||
		!strings.Contains(err.Error(), "--allow-non-restored-state") {
		t.Fatalf("position of a topic no longer read: got %v", err)
	}
	cfg.DropUnreadPositions = true
	r := openReader(t, cfg, 1, []checkpoint.SourcePosition{
		{Source: "src", Topic: "gone", Partition: 1, Offset: 7},
		{Source: "src", Topic: topic, Partition: 1, Offset: 0},
	})
	if pos := positionsOf(t, r.Positions(), 1); len(pos) != 1 || pos[topic] != 0 {
		t.Fatalf("positions %v", pos)
	}
}

// TestRestoredOffsetOutOfRange: a checkpoint position beyond the log is data
// the job cannot account for; the reader fails instead of resetting.
func TestRestoredOffsetOutOfRange(t *testing.T) {
	c := testcluster.Kafka(t)
	topic := testcluster.UniqueName(t, "in")
	createTopics(t, c, 1, topic)
	produce(t, producer(t, c), topic, 0, "v0")
	r := openReader(t, source.Config[string]{Brokers: c.Brokers, Topics: []string{topic}, Decode: str}, 0,
		[]checkpoint.SourcePosition{{Source: "src", Topic: topic, Partition: 0, Offset: 100}})
	deadline := time.Now().Add(waitFor)
	for {
		var b engine.Batch[string]
		err := r.Poll(testCtx(t), &b)
		if b.Len() > 0 {
			t.Fatalf("records %v from an out-of-range position", b.Values)
		}
		if err != nil {
			if !errors.Is(err, source.ErrLogLost) || !strings.Contains(err.Error(), topic+"/0 at offset 100") ||
				!strings.Contains(err.Error(), "the log ends at offset 1 now") {
				t.Errorf("error %q is not ErrLogLost naming the topic, the offset and where the log ends", err)
			}
			t.Logf("out of range: %v", err)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no error within %v for an out-of-range position", waitFor)
		}
	}
}

func TestDecodeFailure(t *testing.T) {
	c := testcluster.Kafka(t)

	setup := func(t *testing.T) (in string) {
		in = testcluster.UniqueName(t, "in")
		createTopics(t, c, 1, in)
		pr := producer(t, c)
		produce(t, pr, in, 0, "1", "2")
		produceRecords(t, pr, &kgo.Record{Topic: in, Key: []byte("k"), Value: []byte("bad"),
			Headers: []kgo.RecordHeader{{Key: "origin", Value: []byte("test")}}})
		produce(t, pr, in, 0, "4")
		return in
	}

	t.Run("dead-letter", func(t *testing.T) {
		in := setup(t)
		dlq := testcluster.UniqueName(t, "dlq")
		createTopics(t, c, 1, dlq)
		r := openReader(t, source.Config[int]{Brokers: c.Brokers, Topics: []string{in}, Decode: atoi, DeadLetterTopic: dlq}, 0, nil)
		got := drain(t, r, 3)
		if !slices.Equal(got.Values, []int{1, 2, 4}) {
			t.Fatalf("got %v, want [1 2 4]", got.Values)
		}
		if off := r.Positions()[0].Offset; off != 4 {
			t.Fatalf("position %d, want 4", off)
		}
		// The dead letter was acked before Poll returned past it: read it
		// now, without waiting for anything else.
		dl := readAll(t, c, dlq, 1)[0]
		if string(dl.Key) != "k" || string(dl.Value) != "bad" {
			t.Errorf("dead letter key %q value %q, want k, bad", dl.Key, dl.Value)
		}
		h := map[string]string{}
		for _, kv := range dl.Headers {
			h[kv.Key] = string(kv.Value)
		}
		want := map[string]string{
			"origin":               "test",
			source.HeaderTopic:     in,
			source.HeaderPartition: "0",
			source.HeaderOffset:    "2",
		}
		for k, v := range want {
			if h[k] != v {
				t.Errorf("header %s = %q, want %q", k, h[k], v)
			}
		}
		if !strings.Contains(h[source.HeaderError], "invalid syntax") {
			t.Errorf("header %s = %q, want the decode error", source.HeaderError, h[source.HeaderError])
		}
	})

	t.Run("fail", func(t *testing.T) {
		in := setup(t)
		r := openReader(t, source.Config[int]{Brokers: c.Brokers, Topics: []string{in}, Decode: atoi, OnDecodeError: source.Fail}, 0, nil)
		err := pollUntilError(t, r)
		var de *source.DecodeError
		if !errors.As(err, &de) {
			t.Fatalf("got %v, want a *DecodeError", err)
		}
		if de.Position.Topic != in || de.Position.Partition != 0 || de.Position.Offset != 2 {
			t.Errorf("decode error at %v, want %s/0@2", de.Position, in)
		}
		if msg := err.Error(); !strings.Contains(msg, in+"/0@2") || !strings.Contains(msg, "invalid syntax") {
			t.Errorf("error %q should name the record and the decode error", msg)
		}
		if off := r.Positions()[0].Offset; off > 2 {
			t.Errorf("position %d: the failed record counts as consumed", off)
		}
	})

	t.Run("panic", func(t *testing.T) {
		in := setup(t)
		panicky := func(r *kgo.Record) (int, error) {
			if string(r.Value) == "bad" {
				panic("boom")
			}
			return atoi(r)
		}
		r := openReader(t, source.Config[int]{Brokers: c.Brokers, Topics: []string{in}, Decode: panicky}, 0, nil)
		err := pollUntilError(t, r)
		var de *source.DecodeError
		if !errors.As(err, &de) || de.Position.Offset != 2 || !strings.Contains(err.Error(), "boom") {
			t.Fatalf("got %v, want a *DecodeError at offset 2 naming the panic", err)
		}
	})

	t.Run("missing dead-letter topic", func(t *testing.T) {
		in := setup(t)
		dlq := testcluster.UniqueName(t, "nodlq")
		_, err := openReaderErr(t, source.Config[int]{Brokers: c.Brokers, Topics: []string{in}, Decode: atoi, DeadLetterTopic: dlq}, 0, nil)
		if err == nil || !strings.Contains(err.Error(), dlq) {
			t.Fatalf("got %v, want an error naming %s", err, dlq)
		}
	})
}

func pollUntilError[T any](t *testing.T, r engine.SourceReader[T]) error {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for time.Now().Before(deadline) {
		var b engine.Batch[T]
		if err := r.Poll(testCtx(t), &b); err != nil {
			return err
		}
	}
	t.Fatalf("no error within %v", waitFor)
	return nil
}

// readAll reads n records of partition 0 of topic from the start.
func readAll(t *testing.T, c *testcluster.Cluster, topic string, n int) []*kgo.Record {
	t.Helper()
	cl := c.Client(t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	ctx, cancel := context.WithTimeout(testCtx(t), waitFor)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			t.Fatalf("read %s: got %d of %d records: %v", topic, len(out), n, err)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

func TestIdlePollReturnsPromptly(t *testing.T) {
	c := testcluster.Kafka(t)
	topic := testcluster.UniqueName(t, "in")
	createTopics(t, c, 1, topic)
	const wait = 50 * time.Millisecond
	r := openReader(t, source.Config[string]{Brokers: c.Brokers, Topics: []string{topic}, Decode: str, PollWait: wait}, 0, nil)
	// Generous against slow CI and -race, still far below franz-go's 5s
	// fetch max wait that an unbounded poll would sit in.
	const bound = 500 * time.Millisecond
	for i := range 5 {
		var b engine.Batch[string]
		start := time.Now()
		if err := r.Poll(testCtx(t), &b); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > bound || b.Len() != 0 {
			t.Fatalf("idle poll %d took %v and returned %d records; want none within %v", i, d, b.Len(), bound)
		}
	}

	ctx, cancel := context.WithCancel(testCtx(t))
	cancel()
	var b engine.Batch[string]
	if err := r.Poll(ctx, &b); !errors.Is(err, context.Canceled) {
		t.Fatalf("poll with a cancelled context: %v", err)
	}
}

// TestWakeEndsAPoll: Wake ends a Poll that waits for records at once, with
// no error and no record lost (the records written after it come with the
// next polls), and a Wake while no Poll runs ends the next one at once.
func TestWakeEndsAPoll(t *testing.T) {
	c := testcluster.Kafka(t)
	topic := testcluster.UniqueName(t, "in")
	createTopics(t, c, 1, topic)
	r := openReader(t, source.Config[string]{Brokers: c.Brokers, Topics: []string{topic}, Decode: str, PollWait: source.MaxPollWait}, 0, nil)
	w, ok := r.(engine.Waker)
	if !ok {
		t.Fatalf("the Kafka reader %T is not an engine.Waker", r)
	}
	// Far below the poll's own wait of a second, generous for -race.
	const bound = 400 * time.Millisecond
	poll := func(what string) {
		t.Helper()
		var b engine.Batch[string]
		start := time.Now()
		if err := r.Poll(testCtx(t), &b); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if d := time.Since(start); d > bound || b.Len() != 0 {
			t.Fatalf("%s took %v and returned %d records; want none within %v", what, d, b.Len(), bound)
		}
	}
	w.Wake()
	poll("a poll after a Wake")
	for i := range 3 {
		go func() {
			time.Sleep(50 * time.Millisecond)
			w.Wake()
		}()
		poll(fmt.Sprintf("woken poll %d", i))
	}
	produce(t, producer(t, c), topic, 0, values("v", 0, 10)...)
	got := drain(t, r, 10)
	if want := values("v", 0, 10); !slices.Equal(got.Values, want) {
		t.Fatalf("after the woken polls: %q, want %q", got.Values, want)
	}
}

func TestCommitter(t *testing.T) {
	c := testcluster.Kafka(t)
	topic := testcluster.UniqueName(t, "in")
	createTopics(t, c, 2, topic)
	produce(t, producer(t, c), topic, 0, values("v", 0, 9)...)
	group := testcluster.UniqueName(t, "group")

	cm, err := source.NewCommitter(c.Brokers, group)
	if err != nil {
		t.Fatal(err)
	}
	defer cm.Close()
	m := checkpoint.Manifest{Operators: []checkpoint.Ack{
		{Operator: "src", Sources: []checkpoint.SourcePosition{{Source: "src", Topic: topic, Partition: 0, Offset: 7}}},
		{Operator: "other", Sources: []checkpoint.SourcePosition{{Source: "other", Topic: topic, Partition: 0, Offset: 5}, {Source: "other", Partition: 3, Offset: 1}}},
		{Operator: "map"},
	}}
	if err := cm.CommitOffsets(testCtx(t), source.ManifestPositions(m)); err != nil {
		t.Fatal(err)
	}
	fetched, err := c.Admin(t).FetchOffsets(testCtx(t), group)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := fetched.Lookup(topic, 0)
	if !ok || o.Err != nil || o.At != 5 {
		t.Fatalf("committed %+v (found %v), want offset 5 (the smaller of two positions)", o, ok)
	}
	if _, ok := fetched.Lookup(topic, 1); ok {
		t.Errorf("partition 1 committed, but no position named it")
	}
}

// TestClientOptionsCannotUndoExactlyOnce: options of the caller's come
// after the reader's own, and franz-go takes the last: read_uncommitted,
// a reset policy or control records kept would read aborted records, skip
// a lost position silently, or take markers for records. The reader
// refuses to open such a client, its own or a shared one.
func TestClientOptionsCannotUndoExactlyOnce(t *testing.T) {
	c := testcluster.Kafka(t)
	topic := testcluster.UniqueName(t, "in")
	createTopics(t, c, 2, topic)
	for _, tc := range []struct {
		name string
		opt  kgo.Opt
		want string
	}{
		{"read uncommitted", kgo.FetchIsolationLevel(kgo.ReadUncommitted()), "kgo.FetchIsolationLevel"},
		{"reset", kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), "kgo.ConsumeResetOffset"},
		{"control records", kgo.KeepControlRecords(), "kgo.KeepControlRecords"},
	} {
		open := func(t *testing.T, cfg source.Config[string], task int) error {
			t.Helper()
			f, err := source.Kafka(cfg)
			if err != nil {
				t.Fatal(err)
			}
			r, err := f(testCtx(t), engine.TaskInfo{Job: "job", Task: task, Operator: "src"}, nil)
			if err == nil {
				r.Close()
			}
			return err
		}
		t.Run(tc.name+"/own", func(t *testing.T) {
			err := open(t, source.Config[string]{Brokers: c.Brokers, Topics: []string{topic}, Decode: str, ClientOpts: []kgo.Opt{tc.opt}}, 0)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("open with %s: %v, want it refused naming it", tc.name, err)
			}
		})
		t.Run(tc.name+"/shared", func(t *testing.T) {
			// From the second task on, the readers share a client.
			cs := source.NewConsumers(0, 1, func(string, int) []kgo.Opt { return []kgo.Opt{tc.opt} })
			for task := range 2 {
				err := open(t, source.Config[string]{Brokers: c.Brokers, Topics: []string{topic}, Decode: str, Consumers: cs}, task)
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("task %d open with %s: %v, want it refused naming it", task, tc.name, err)
				}
			}
		})
	}
	// The options the worker passes (TLS, SASL, fetch sizes) are fine.
	if err := func() error {
		f, err := source.Kafka(source.Config[string]{Brokers: c.Brokers, Topics: []string{topic}, Decode: str, ClientOpts: []kgo.Opt{kgo.FetchMaxBytes(1 << 20)}})
		if err != nil {
			return err
		}
		r, err := f(testCtx(t), engine.TaskInfo{Job: "job", Task: 0, Operator: "src"}, nil)
		if err == nil {
			r.Close()
		}
		return err
	}(); err != nil {
		t.Fatalf("open with a fetch size: %v", err)
	}
}
