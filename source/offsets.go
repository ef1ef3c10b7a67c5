package source

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/checkpoint"
)

// ErrPartitionMismatch is wrapped by the error PartitionCount and a reader's
// open return when the input topics do not all have the same partition
// count.
var ErrPartitionMismatch = errors.New("input topics have different partition counts")

// PartitionCount returns the partition count shared by topics: the number of
// tasks of a job that reads them. It fails if a topic does not exist or if
// the counts differ, naming every topic and its count. opts are extra client
// options (TLS, SASL).
func PartitionCount(ctx context.Context, brokers, topics []string, opts ...kgo.Opt) (int, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		return 0, fmt.Errorf("partition count: %w", err)
	}
	defer cl.Close()
	return partitionCount(ctx, kadm.NewClient(cl), topics)
}

// PartitionCountWait is PartitionCount that waits up to wait for topics
// the broker does not know yet: a topic just created reaches the brokers'
// metadata a moment later.
func PartitionCountWait(ctx context.Context, brokers, topics []string, wait time.Duration, opts ...kgo.Opt) (int, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		return 0, fmt.Errorf("partition count: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	deadline := time.Now().Add(wait)
	for {
		n, err := partitionCount(ctx, adm, topics)
		if !errors.Is(err, kerr.UnknownTopicOrPartition) || time.Now().After(deadline) {
			return n, err
		}
		select { // pacing: the broker gives no signal when metadata lands
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func partitionCount(ctx context.Context, adm *kadm.Client, topics []string) (int, error) {
	ls, err := topicLayouts(ctx, adm, topics)
	if err != nil {
		return 0, err
	}
	return int(ls[topics[0]].Partitions), nil
}

// topicLayouts returns the id and partition count of each of topics, which
// must exist and have one partition count.
func topicLayouts(ctx context.Context, adm *kadm.Client, topics []string) (map[string]checkpoint.TopicLayout, error) {
	if len(topics) == 0 {
		return nil, errors.New("partition count: no topics")
	}
	tds, err := adm.ListTopics(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("describe topics %s: %w", strings.Join(topics, ", "), err)
	}
	out := make(map[string]checkpoint.TopicLayout, len(topics))
	counts := make([]string, 0, len(topics))
	n, same := -1, true
	for _, t := range topics {
		td, ok := tds[t]
		if !ok {
			return nil, fmt.Errorf("input topic %q: not in metadata", t)
		}
		if td.Err != nil {
			return nil, fmt.Errorf("input topic %q: %w", t, td.Err)
		}
		c := len(td.Partitions)
		if n >= 0 && c != n {
			same = false
		}
		n = c
		counts = append(counts, fmt.Sprintf("%s=%d", t, c))
		out[t] = checkpoint.TopicLayout{Name: t, ID: TopicID(td.ID), Partitions: int32(c)}
	}
	if !same {
		return nil, fmt.Errorf("%w (%s): a task reads partition p of every input topic, so all need the same count",
			ErrPartitionMismatch, strings.Join(counts, ", "))
	}
	return out, nil
}

// TopicID is the form of a Kafka topic id that checkpoints record and
// errors show: Kafka's own (URL-safe base64 without padding, as
// kafka-topics.sh --describe prints it, where kadm's String pads standard
// base64), so that an operator can match it; empty for the zero id (a
// broker older than topic ids, KIP-516).
func TopicID(id kadm.TopicID) string {
	if id == (kadm.TopicID{}) {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString(id[:])
}

// startOffsets resolves the start setting to a concrete position in
// partition p of each topic: the offset, and the leader epoch the broker
// gives with it (as the Java consumer keeps after a reset, KIP-320), so
// that a checkpoint of the position taken before any record is read
// still notices a log truncated below it (an unclean leader election).
func startOffsets[T any](ctx context.Context, adm *kadm.Client, cfg *Config[T], topics []string, p int32) (map[string]topicPos, error) {
	var (
		listed kadm.ListedOffsets
		err    error
	)
	switch cfg.start() {
	case StartEarliest:
		listed, err = adm.ListStartOffsets(ctx, topics...)
	case StartLatest:
		// The last stable offset, not the high watermark: records of a
		// transaction open now are delivered if it commits later.
		listed, err = adm.ListCommittedOffsets(ctx, topics...)
	case StartTimestamp:
		listed, err = adm.ListOffsetsAfterMilli(ctx, cfg.StartTime.UnixMilli(), topics...)
	}
	if err != nil {
		return nil, fmt.Errorf("list %s offsets: %w", cfg.start(), err)
	}
	out := make(map[string]topicPos, len(topics))
	for _, t := range topics {
		o, ok := listed.Lookup(t, p)
		switch {
		case !ok:
			return nil, fmt.Errorf("list %s offsets: no answer for %s/%d", cfg.start(), t, p)
		case o.Err != nil:
			return nil, fmt.Errorf("list %s offsets of %s/%d: %w", cfg.start(), t, p, o.Err)
		case o.Offset < 0:
			return nil, fmt.Errorf("list %s offsets of %s/%d: broker returned offset %d", cfg.start(), t, p, o.Offset)
		}
		out[t] = topicPos{next: o.Offset, epoch: o.LeaderEpoch, hasEpoch: o.LeaderEpoch >= 0}
	}
	return out, nil
}

// Committer writes a consumer group's committed offsets from checkpoint
// positions, so that Kafka tooling (kafka-consumer-groups, lag exporters)
// shows a job's lag. Those offsets are for monitoring only: nothing reads
// them back, restores use checkpoints.
//
// The group must have no active members: the broker refuses an offset commit
// from outside the group's generation while members are joined
// (UNKNOWN_MEMBER_ID, checked on Kafka 4.4 and kfake). If the workers of a job
// form a consumer group under the job's group id, give lag monitoring another
// id (for instance "<group>-lag").
type Committer struct {
	cl    *kgo.Client
	adm   *kadm.Client
	group string
}

// NewCommitter returns a committer for group. Close it when done.
func NewCommitter(brokers []string, group string, opts ...kgo.Opt) (*Committer, error) {
	if group == "" {
		return nil, errors.New("committer: empty group id")
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("committer for group %s: %w", group, err)
	}
	return &Committer{cl: cl, adm: kadm.NewClient(cl), group: group}, nil
}

// CommitOffsets commits positions (for instance those of a completed
// checkpoint's manifest, see ManifestPositions) as the group's offsets.
// Positions without a topic (non-Kafka sources) are ignored; where two
// positions name one partition the smaller offset is committed, which
// overstates lag rather than hiding it.
func (c *Committer) CommitOffsets(ctx context.Context, positions []checkpoint.SourcePosition) error {
	offsets := make(kadm.Offsets)
	for _, p := range positions {
		if p.Topic == "" || p.Offset < 0 {
			continue
		}
		if o, ok := offsets.Lookup(p.Topic, p.Partition); ok {
			if o.At <= p.Offset {
				continue
			}
			offsets.Delete(p.Topic, p.Partition) // Add keeps the larger
		}
		offsets.Add(kadm.Offset{Topic: p.Topic, Partition: p.Partition, At: p.Offset, LeaderEpoch: -1})
	}
	if len(offsets) == 0 {
		return nil
	}
	resp, err := c.adm.CommitOffsets(ctx, c.group, offsets)
	if err == nil {
		err = resp.Error()
	}
	if errors.Is(err, kerr.UnknownMemberID) || errors.Is(err, kerr.IllegalGeneration) {
		return fmt.Errorf("commit offsets of group %s: %w (the group has active members, which an "+
			"outside commit may not race; give lag monitoring a group id of its own)", c.group, err)
	}
	if err != nil {
		return fmt.Errorf("commit offsets of group %s: %w", c.group, err)
	}
	return nil
}

// DeleteRecords deletes the records before positions: each partition's
// log start offset moves up to its position (never down). Positions
// without a topic are ignored; where two name one partition, the smaller
// wins.
func (c *Committer) DeleteRecords(ctx context.Context, positions []checkpoint.SourcePosition) error {
	offsets := make(kadm.Offsets)
	for _, p := range positions {
		if p.Topic == "" || p.Offset <= 0 {
			continue
		}
		if o, ok := offsets.Lookup(p.Topic, p.Partition); ok && o.At <= p.Offset {
			continue
		}
		offsets.Delete(p.Topic, p.Partition)
		offsets.Add(kadm.Offset{Topic: p.Topic, Partition: p.Partition, At: p.Offset, LeaderEpoch: -1})
	}
	if len(offsets) == 0 {
		return nil
	}
	resp, err := c.adm.DeleteRecords(ctx, offsets)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return fmt.Errorf("delete records: %w", err)
	}
	return nil
}

// Close closes the committer's client.
func (c *Committer) Close() { c.cl.Close() }

// EndOffsets returns the last stable offset of each partition of topic
// (where a read_committed reader's input ends now) and its end offset (the
// high watermark): records between the two wait behind a transaction
// still open.
func (c *Committer) EndOffsets(ctx context.Context, topic string) (stable, end map[int32]int64, err error) {
	ls, err := c.adm.ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = ls.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("last stable offsets of %s: %w", topic, err)
	}
	le, err := c.adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = le.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	stable, end = map[int32]int64{}, map[int32]int64{}
	ls.Each(func(o kadm.ListedOffset) { stable[o.Partition] = o.Offset })
	le.Each(func(o kadm.ListedOffset) { end[o.Partition] = o.Offset })
	return stable, end, nil
}

// ManifestPositions returns the source positions of every operator of m.
func ManifestPositions(m checkpoint.Manifest) []checkpoint.SourcePosition {
	var out []checkpoint.SourcePosition
	for _, a := range m.Operators {
		out = append(out, a.Sources...)
	}
	return slices.Clip(out)
}
