package source_test

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/internal/testcluster"
	"github.com/weirstream/weir/source"
)

// TestStartPositionCarriesEpoch: a task without a checkpoint starts at the
// offset --start resolves to, and its first checkpoint records that
// position before any record is read. Without the leader epoch the broker
// gave with the offset, a restore of it onto a log truncated below it (an
// unclean leader election, then new writes) read on past records written
// after the job started, and nothing said so. With the epoch it is
// refused, as a position taken after a record is.
func TestStartPositionCarriesEpoch(t *testing.T) {
	fake, err := kfake.NewCluster(kfake.NumBrokers(2), kfake.DefaultNumPartitions(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close)
	c := &testcluster.Cluster{Brokers: fake.ListenAddrs(), Provider: testcluster.ProviderInProcess, Fake: fake}
	pr := producer(t, c)

	// A start at the end of 8 records written in epoch 0.
	a := testcluster.UniqueName(t, "a")
	createTopics(t, c, 1, a)
	produce(t, pr, a, 0, values("e0-", 0, 8)...)
	start := openReader(t, source.Config[string]{Brokers: c.Brokers, Topics: []string{a}, Decode: str, Start: source.StartLatest}, 0, nil).Positions()[0]
	if start.Offset != 8 || start.LeaderEpoch == nil || *start.LeaderEpoch != 0 {
		t.Fatalf("start position %+v: want offset 8 in epoch 0", start)
	}

	// That position, restored where epoch 0 ended at offset 5 and epoch 1
	// wrote offsets 5 to 14.
	b := testcluster.UniqueName(t, "b")
	createTopics(t, c, 1, b)
	produce(t, pr, b, 0, values("e0-", 0, 5)...)
	other := int32(1)
	if fake.LeaderFor(b, 0) == 1 {
		other = 0
	}
	if err := fake.MoveTopicPartition(b, 0, other); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the clients learn the new leader
	produce(t, pr, b, 0, values("e1-", 5, 15)...)
	id, n := topicDetail(t, c, b)
	restored := checkpoint.SourcePosition{Source: "src", Topic: b, Partition: 0, Offset: start.Offset, LeaderEpoch: start.LeaderEpoch, TopicID: id, Partitions: n}
	r := openReader(t, source.Config[string]{Brokers: c.Brokers, Topics: []string{b}, Decode: str}, 0, []checkpoint.SourcePosition{restored})
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		var batch engine.Batch[string]
		err := r.Poll(testCtx(t), &batch)
		if batch.Len() > 0 {
			t.Fatalf("read %v from offset %d on: the truncation below the start position went unnoticed", batch.Values, batch.Positions[0].Offset)
		}
		if err != nil {
			if !errors.Is(err, source.ErrLogLost) {
				t.Fatalf("got %v, want ErrLogLost", err)
			}
			return
		}
	}
	t.Fatal("no error and no record in 10 s")
}
