package source_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/internal/testcluster"
	"github.com/weirstream/weir/source"
)

// topicDetail returns topic's id (in the form positions record) and
// partition count as the broker's metadata has them now.
func topicDetail(t *testing.T, c *testcluster.Cluster, topic string) (string, int32) {
	t.Helper()
	tds, err := c.Admin(t).ListTopics(testCtx(t), topic)
	if err != nil {
		t.Fatal(err)
	}
	td := tds[topic]
	if td.Err != nil {
		t.Fatalf("topic %s: %v", topic, td.Err)
	}
	return source.TopicID(td.ID), int32(len(td.Partitions))
}

// waitLayout waits until the broker's metadata shows topic with
// partitions and an id other than notID.
func waitLayout(t *testing.T, c *testcluster.Cluster, topic string, partitions int32, notID string) string {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		tds, err := c.Admin(t).ListTopics(testCtx(t), topic)
		if err == nil {
			if td := tds[topic]; td.Err == nil && int32(len(td.Partitions)) == partitions && source.TopicID(td.ID) != notID {
				return source.TopicID(td.ID)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("topic %s with %d partitions (id other than %s) not in metadata within %v", topic, partitions, notID, waitFor)
		}
	}
}

// recreateTopic deletes topic and creates it again with partitions,
// once the broker finished the deletion, and returns its new id.
func recreateTopic(t *testing.T, c *testcluster.Cluster, topic string, partitions int32) string {
	t.Helper()
	old, _ := topicDetail(t, c, topic)
	adm := c.Admin(t)
	resp, err := adm.DeleteTopics(testCtx(t), topic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("delete topic %s: %v", topic, err)
	}
	deadline := time.Now().Add(waitFor)
	for {
		res, err := adm.CreateTopic(testCtx(t), partitions, -1, nil, topic)
		if err == nil {
			err = res.Err
		}
		if err == nil {
			break
		}
		// A real broker deletes asynchronously: the name is taken until then.
		if !errors.Is(err, kerr.TopicAlreadyExists) || time.Now().After(deadline) {
			t.Fatalf("recreate topic %s: %v", topic, err)
		}
	}
	return waitLayout(t, c, topic, partitions, old)
}

// TestPositionsRecordLayout: a reader's positions carry the topic's id and
// partition count from the start, and the leader epoch of the last record
// once it read one.
func TestPositionsRecordLayout(t *testing.T) {
	c := testcluster.Kafka(t)
	topic := testcluster.UniqueName(t, "in")
	createTopics(t, c, 3, topic)
	id, _ := topicDetail(t, c, topic)
	if id == "" {
		t.Fatalf("the broker (%s) has no topic ids", c.Provider)
	}
	r := openReader(t, source.Config[string]{Brokers: c.Brokers, Topics: []string{topic}, Decode: str}, 1, nil)
	p := r.Positions()[0]
	// Before any record: the epoch the broker gave with the start offset,
	// if it has one (kfake does for an empty log; Kafka does not).
	if p.TopicID != id || p.Partitions != 3 || (p.LeaderEpoch != nil && *p.LeaderEpoch < 0) {
		t.Fatalf("position before any record %+v, want topic id %s, 3 partitions", p, id)
	}
	produce(t, producer(t, c), topic, 1, values("v", 0, 3)...)
	drain(t, r, 3)
	p = r.Positions()[0]
	if p.TopicID != id || p.Partitions != 3 || p.Offset != 3 || p.LeaderEpoch == nil || *p.LeaderEpoch < 0 {
		t.Fatalf("position after 3 records %+v, want topic id %s, 3 partitions, offset 3, a leader epoch", p, id)
	}
}

// TestRestoreRefusesChangedLayout: a checkpoint's positions are refused,
// with ErrLayoutChanged and the topic's old and new layout, when the topic
// was deleted and recreated (even with more records than the checkpoint's
// offset, which a reader would otherwise read from there) or has more
// partitions; a position of an earlier version, without a layout, is
// accepted.
func TestRestoreRefusesChangedLayout(t *testing.T) {
	c := testcluster.Kafka(t)
	// checkpointed reads 4 records of partition 0 of a new 2-partition
	// topic and returns the topic and the reader's positions.
	checkpointed := func(t *testing.T) (string, []checkpoint.SourcePosition) {
		topic := testcluster.UniqueName(t, "in")
		createTopics(t, c, 2, topic)
		produce(t, producer(t, c), topic, 0, values("old", 0, 4)...)
		r := openReader(t, source.Config[string]{Brokers: c.Brokers, Topics: []string{topic}, Decode: str}, 0, nil)
		drain(t, r, 4)
		saved := r.Positions()
		r.Close()
		return topic, saved
	}
	refused := func(t *testing.T, topic string, saved []checkpoint.SourcePosition, want ...string) {
		t.Helper()
		r, err := openReaderErr(t, source.Config[string]{Brokers: c.Brokers, Topics: []string{topic}, Decode: str}, 0, saved)
		if err == nil {
			var b engine.Batch[string]
			_ = r.Poll(testCtx(t), &b)
			r.Close()
			t.Fatalf("restored; the first poll read %v", b.Values)
		}
		var le *checkpoint.LayoutError
		if !errors.Is(err, checkpoint.ErrLayoutChanged) || !errors.As(err, &le) {
			t.Fatalf("got %v, want a *checkpoint.LayoutError", err)
		}
		for _, w := range append(want, "the checkpoint of task 0", "start the job afresh under a new name") {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error lacks %q:\n%v", w, err)
			}
		}
	}

	t.Run("recreated", func(t *testing.T) {
		topic, saved := checkpointed(t)
		old := saved[0].TopicID
		id := recreateTopic(t, c, topic, 2)
		produce(t, producer(t, c), topic, 0, values("new", 0, 6)...)
		refused(t, topic, saved, "topic "+topic+" was deleted and recreated: topic id "+id+", was "+old)
	})
	t.Run("partitions added", func(t *testing.T) {
		topic, saved := checkpointed(t)
		resp, err := c.Admin(t).CreatePartitions(testCtx(t), 2, topic)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			t.Fatalf("add partitions: %v", err)
		}
		waitLayout(t, c, topic, 4, "")
		refused(t, topic, saved, "topic "+topic+" has 4 partitions, was 2 (partitions were added)")
	})
	t.Run("earlier version", func(t *testing.T) {
		topic, saved := checkpointed(t)
		old := saved[0]
		produce(t, producer(t, c), topic, 0, "old4")
		r := openReader(t, source.Config[string]{Brokers: c.Brokers, Topics: []string{topic}, Decode: str}, 0,
			[]checkpoint.SourcePosition{{Source: old.Source, Topic: old.Topic, Partition: old.Partition, Offset: old.Offset}})
		if got := drain(t, r, 1).Values; got[0] != "old4" {
			t.Fatalf("restored a position without layout: read %v, want old4", got)
		}
		if p := r.Positions()[0]; p.TopicID != old.TopicID || p.Partitions != 2 {
			t.Errorf("position %+v: the layout is recorded from now on", p)
		}
	})
}

// TestLogLost: a restored position the log no longer holds (records
// deleted below it) fails the reader with ErrLogLost, naming the topic,
// partition and offset and what to do; it never reads on from the log
// start.
func TestLogLost(t *testing.T) {
	c := testcluster.Kafka(t)
	topic := testcluster.UniqueName(t, "in")
	createTopics(t, c, 1, topic)
	produce(t, producer(t, c), topic, 0, values("v", 0, 6)...)
	offsets := make(kadm.Offsets)
	offsets.Add(kadm.Offset{Topic: topic, Partition: 0, At: 4, LeaderEpoch: -1})
	resp, err := c.Admin(t).DeleteRecords(testCtx(t), offsets)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("delete records: %v", err)
	}
	r := openReader(t, source.Config[string]{Brokers: c.Brokers, Topics: []string{topic}, Decode: str}, 0,
		[]checkpoint.SourcePosition{{Source: "src", Topic: topic, Partition: 0, Offset: 2}})
	deadline := time.Now().Add(waitFor)
	for {
		var b engine.Batch[string]
		err := r.Poll(testCtx(t), &b)
		if b.Len() > 0 {
			t.Fatalf("records %v from a position below the log start", b.Values)
		}
		if err != nil {
			if !errors.Is(err, source.ErrLogLost) {
				t.Fatalf("got %v, want ErrLogLost", err)
			}
			for _, w := range []string{topic + "/0 at offset 2", "the log starts at offset 4 now, records were deleted before the job read them", "start the job afresh under a new name"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no error within %v for a position below the log start", waitFor)
		}
	}
}
