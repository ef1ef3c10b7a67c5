package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/internal/cli"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/source"
)

// badRecords is the worker's engine.BadRecords: what becomes of a record
// whose key belongs to another task (a KeyBy off the input's partitioning,
// see stream.KeyBy), under the job's bad-record policy (--on-decode-error).
//
// A record of the input goes to --dead-letter, or fails the task. A record
// of an internal topic always fails it: weir wrote it, keyed by the same
// KeyBy's codec, so it is not bad input but a topic written by a job whose
// key differed (an upgrade that changed it) or a bug, and skipping it would
// lose it.
type badRecords struct {
	internal map[string]bool
	// topic and cl write dead letters; cl is nil under --on-decode-error
	// fail.
	topic string
	cl    *kgo.Client
	st    *Stats // counts what it dead-letters; nil counts nothing
}

// newBadRecords returns the worker's bad-record handling; close releases
// its producer.
func newBadRecords(c *Config, st *Stats, internal []string, opts []kgo.Opt) (_ *badRecords, close func(), err error) {
	b := &badRecords{internal: map[string]bool{}, topic: c.DeadLetter, st: st}
	for _, t := range internal {
		b.internal[t] = true
	}
	if !c.deadLettering() {
		return b, func() {}, nil
	}
	b.cl, err = kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(c.Brokers...),
		kgo.DefaultProduceTopic(c.DeadLetter),
		kgo.RequiredAcks(kgo.AllISRAcks()),
	}, opts...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("dead-letter producer: %w", err)
	}
	return b, b.cl.Close, nil
}

// checkDeadLetter fails, naming --dead-letter, when dead-lettering is on
// and the topic does not exist. Each task's source checks it again when it
// opens, but a missing topic found only there is a task failing and
// restarting until it gives up, and nothing on a worker of a group that
// gets no task. It waits up to wait for a topic the brokers do not know
// yet, as the inputs' check does: a topic just created reaches their
// metadata a moment later.
func checkDeadLetter(ctx context.Context, c *Config, opts []kgo.Opt, wait time.Duration) error {
	if !c.deadLettering() {
		return nil
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.Brokers...)}, opts...)...)
	if err != nil {
		return fmt.Errorf("dead-letter topic %q: %w", c.DeadLetter, err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	deadline := time.Now().Add(wait)
	for {
		tds, err := adm.ListTopics(ctx, c.DeadLetter)
		if err != nil {
			return fmt.Errorf("dead-letter topic %q: %w", c.DeadLetter, err)
		}
		td, ok := tds[c.DeadLetter]
		switch {
		case ok && td.Err == nil:
			return nil
		case ok && !errors.Is(td.Err, kerr.UnknownTopicOrPartition):
			return fmt.Errorf("dead-letter topic %q: %w", c.DeadLetter, td.Err)
		case time.Now().After(deadline):
			return cli.UsageError{Err: fmt.Errorf("--dead-letter: topic %q does not exist (create it before the job starts)", c.DeadLetter)}
		}
		select { // pacing: the broker gives no signal when metadata lands
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// MisKeyed implements engine.BadRecords. A dead letter has the key's
// bytes as its key and no value (the keyed operator does not have the
// record as read: operators before it may have changed it), the headers of
// a record the source dead-letters (weir.error, weir.source.topic,
// .partition, .offset) and the record's event time. It is written outside
// the checkpoint's transaction and acknowledged before the task goes on:
// after a crash before the next checkpoint, the record is dead-lettered
// again (at least once), as the source's dead letters are.
func (b *badRecords) MisKeyed(ctx context.Context, info engine.TaskInfo, pos engine.Position, key []byte, err *engine.MisKeyedError) error {
	if pos.Emitted() {
		return err // an operator's own output: nothing of the input to set aside
	}
	if b.internal[pos.Topic] {
		return fmt.Errorf("%w; it is a record of the internal topic %s, which weir writes keyed by this KeyBy's codec: "+
			"the topic holds records of a job whose key or key codec differed (delete the topic with the job's checkpoints to start afresh), or this is a bug", err, pos.Topic)
	}
	if b.cl == nil {
		return err
	}
	rec := &kgo.Record{
		Key: slices.Clone(key),
		Headers: []kgo.RecordHeader{
			{Key: source.HeaderError, Value: []byte(err.Error())},
			{Key: source.HeaderTopic, Value: []byte(pos.Topic)},
			{Key: source.HeaderPartition, Value: strconv.AppendInt(nil, int64(pos.Partition), 10)},
			{Key: source.HeaderOffset, Value: strconv.AppendInt(nil, pos.Offset, 10)},
		},
		Timestamp: time.UnixMilli(pos.Timestamp),
	}
	if perr := b.cl.ProduceSync(ctx, rec).FirstErr(); perr != nil {
		// Not ErrMisKeyed: the task restarts and tries again.
		return fmt.Errorf("dead-letter mis-keyed record %s to %s: %w (the record: %s)", pos, b.topic, perr, err.Error())
	}
	if b.st != nil {
		b.st.task(info.Task).misKeyed.Add(1)
	}
	if info.Logger != nil {
		info.Logger.Warn("dead-lettered a record keyed by a key of another task",
			"topic", pos.Topic, "partition", pos.Partition, "offset", pos.Offset, "key", err.Key,
			"task_of_key", err.Owner, "keyby", err.KeyBy, "partitioner", err.Partitioner, "dead_letter_topic", b.topic)
	}
	return nil
}

// deadLettering says whether bad records go to --dead-letter (else they
// fail the task): --on-decode-error dead-letter, the default with
// --dead-letter.
func (c *Config) deadLettering() bool {
	return c.OnDecodeError == string(source.DeadLetter) || (c.OnDecodeError == "" && c.DeadLetter != "")
}
