package sink

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/checkpoint"
)

// Merged transactions. closeHanging finds a skipped marker when a task
// starts. A commit marker skipped while the task runs on is not found
// there: the partition keeps the committed transaction open, and the
// transactional id's next transaction that writes the partition continues
// it (the partition takes a newer epoch for the same producer's next
// batch). Whichever way that transaction ends decides the records of
// both. Committed, that is right. Aborted, by the writer's Close, by the
// next owner's InitProducerID, or by a restore that walks back past the
// checkpoint naming it (Abort), the committed transaction's records (a
// completed checkpoint's output) are lost, and nothing says so.
//
// Under transaction version 2 each transaction of a producer has an epoch
// of its own, so a partition's open range whose first batch is older than
// the open transaction's epoch holds two. Before anything aborts an open
// transaction (Close; InitProducerID at a start, for an id its coordinator
// has Ongoing; Abort), the sink reads the first batch of each open range
// of its producer id, and does not abort one that holds an older
// transaction: Close leaves it to the next owner, and the next owner (or
// Abort) fails without aborting, saying where the records are. Neither a
// commit (the open transaction's records are replayed from the
// checkpoint: they would be duplicated) nor an abort is right; an
// operator copies the older transaction's records, then aborts.
//
// A range found at a start with no transaction open any more (both
// markers skipped: the older transaction's, then the one that continued
// it) is one too: closeHanging reads its first batch before writing a
// marker (mergedHanging), since one marker ends the whole range.
//
// A start or restore that finds such a range, and a Close that does not
// abort the open transaction for one, fail with a *MergedTransactionError,
// which holds the task (engine.Holding): the transaction timeout aborts the
// open range without asking anyone, and after it nothing a start could
// find would say what was lost. Not covered: a range open when its owner
// died (kill -9) or when its Close could not check, which no start sees
// before the timeout.

// openTxnAt is a transaction open at its coordinator under a producer id
// and epoch, with the partitions it may have written (a topic with no
// partitions named: all of them).
type openTxnAt struct {
	txnID string
	pid   int64
	epoch int16
	parts kadm.TopicsSet
	// deadline is when its coordinator aborts it (zero: not known).
	deadline time.Time
}

// mergedTxn is an open range of a partition that holds an older
// transaction of the producer id before the open one.
type mergedTxn struct {
	txnID      string
	topic      string
	partition  int32
	pid        int64
	start      int64 // the range's first offset
	firstEpoch int16 // the epoch of the batch at start
	epoch      int16 // the open transaction's
	deadline   time.Time
}

func (m mergedTxn) String() string {
	return fmt.Sprintf("%s/%d from offset %d (transactional id %s, producer id %d: a transaction at epoch %d, then the open one at epoch %d)",
		m.topic, m.partition, m.start, m.txnID, m.pid, m.firstEpoch, m.epoch)
}

// batchAt names the batch at an offset of a topic's partition.
type batchAt struct {
	topic     string
	partition int32
	offset    int64
}

// firstEpochsFunc returns the producer epoch of the batch at each of at.
type firstEpochsFunc func(ctx context.Context, at []batchAt) (map[batchAt]int16, error)

// findMerged returns the open ranges of txns' partitions that began at an
// older epoch than their open transaction.
func findMerged(ctx context.Context, log *slog.Logger, adm hangingAdmin, firstEpochs firstEpochsFunc, txns []openTxnAt) ([]mergedTxn, error) {
	parts := kadm.TopicsSet{}
	for _, t := range txns {
		for topic, ps := range t.parts {
			switch all, ok := parts[topic]; {
			case ok && len(all) == 0:
			case len(ps) == 0:
				parts[topic] = map[int32]struct{}{} // kadm asks for every partition
			default:
				parts.Add(topic, slices.Collect(maps.Keys(ps))...)
			}
		}
	}
	if len(parts) == 0 {
		return nil, nil
	}
	ps, err := describeWaiting(ctx, log, adm, parts)
	if err != nil {
		if errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed) {
			return nil, &uncheckedError{err}
		}
		return nil, err
	}
	var found []mergedTxn
	var toRead []batchAt
	for _, t := range txns {
		for _, p := range ps {
			if p.ProducerID != t.pid || p.CurrentTxnStartOffset < 0 || !lookupOrAll(t.parts, p.Topic, p.Partition) {
				continue
			}
			found = append(found, mergedTxn{txnID: t.txnID, topic: p.Topic, partition: p.Partition, pid: p.ProducerID,
				start: p.CurrentTxnStartOffset, firstEpoch: p.ProducerEpoch, epoch: t.epoch, deadline: t.deadline})
			if p.ProducerEpoch >= t.epoch {
				// The open transaction wrote here: the range holds an
				// older one only if its first batch is older.
				toRead = append(toRead, batchAt{p.Topic, p.Partition, p.CurrentTxnStartOffset})
			}
		}
	}
	var epochs map[batchAt]int16
	if len(toRead) > 0 {
		if epochs, err = firstEpochs(ctx, toRead); err != nil {
			return nil, fmt.Errorf("read the first batches of the open transactions: %w", err)
		}
	}
	var out []mergedTxn
	for _, m := range found {
		if m.firstEpoch >= m.epoch {
			e, ok := epochs[batchAt{m.topic, m.partition, m.start}]
			if !ok {
				return nil, fmt.Errorf("no first batch read for %v", m)
			}
			m.firstEpoch = e
		}
		if m.firstEpoch < m.epoch {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b mergedTxn) int { return strings.Compare(a.String(), b.String()) })
	return out, nil
}

// lookupOrAll reports whether s names the partition, a topic without
// partitions naming all of its.
func lookupOrAll(s kadm.TopicsSet, topic string, partition int32) bool {
	ps, ok := s[topic]
	return ok && (len(ps) == 0 || s.Lookup(topic, partition))
}

// MergedTransactionError says an output partition holds, in one open
// range under the task's producer id, a transaction that its coordinator
// ended without the partition's marker and the open transaction after it.
// The writer does not initialise the transactional id: that would abort
// both (see findMerged).
type MergedTransactionError struct {
	Merged []string // each as topic/partition from offset ...
	// Abort lists the kafka-transactions.sh commands that end them, once
	// the older transaction's records are copied.
	Abort []string
	// Deadline is when the first of the open transactions reaches its
	// timeout and its coordinator aborts it, the older records with it
	// (zero: not known).
	Deadline time.Time
}

func (e *MergedTransactionError) Error() string {
	s := fmt.Sprintf("output partitions hold an open transaction that continues an older one of the same producer id, whose marker its coordinator skipped "+
		"(a partition without a leader at that moment): %s. "+
		"Initialising the transactional id would abort both, and the older one may have committed (a checkpoint's output); "+
		"committing both would duplicate the open one's records, which the restore replays. "+
		"Copy the older transaction's records (read_uncommitted, from the offset named up to the first batch at the open epoch) and produce them again, "+
		"then abort with %s",
		strings.Join(e.Merged, "; "), strings.Join(e.Abort, " and "))
	if !e.Deadline.IsZero() {
		s += fmt.Sprintf(". Copy them before %s (by the broker's clock: the open transaction's start plus its timeout, --txn-timeout): "+
			"then its coordinator aborts it, the older records with it, and they stay readable only read_uncommitted, until the topic's retention deletes them",
			e.Deadline.UTC().Format(time.RFC3339))
	}
	return s
}

// HoldName implements engine.Holding: the task holds until an operator
// has dealt with the ranges. Nothing a later start can find keeps this
// failure once the coordinator aborts the open transaction at its timeout;
// the hold does. The name is the same for the same ranges.
func (e *MergedTransactionError) HoldName() string {
	sum := sha256.Sum256([]byte(strings.Join(e.Merged, "\n")))
	return "merged-transaction-" + hex.EncodeToString(sum[:8])
}

func mergedError(ms []mergedTxn) *MergedTransactionError {
	e := &MergedTransactionError{}
	for _, m := range ms {
		if !m.deadline.IsZero() && (e.Deadline.IsZero() || m.deadline.Before(e.Deadline)) {
			e.Deadline = m.deadline
		}
		e.Merged = append(e.Merged, m.String())
		e.Abort = append(e.Abort, fmt.Sprintf("`kafka-transactions.sh --bootstrap-server BROKERS abort --topic %s --partition %d --start-offset %d`",
			m.topic, m.partition, m.start))
	}
	return e
}

// readFirstEpochs returns a firstEpochsFunc that reads with clients of
// opts, read_uncommitted: one a round, each round reading one offset of
// each partition (partitions where several producers hold a range open
// take several rounds).
func readFirstEpochs(opts []kgo.Opt) firstEpochsFunc {
	return func(ctx context.Context, at []batchAt) (map[batchAt]int16, error) {
		out := make(map[batchAt]int16, len(at))
		left := slices.Clone(at)
		for len(left) > 0 {
			round, next := map[string]map[int32]int64{}, left[:0:0]
			for _, b := range left {
				if _, dup := out[b]; dup {
					continue
				}
				if o, taken := round[b.topic][b.partition]; taken {
					if o != b.offset {
						next = append(next, b)
					}
					continue
				}
				if round[b.topic] == nil {
					round[b.topic] = map[int32]int64{}
				}
				round[b.topic][b.partition] = b.offset
			}
			if err := readRound(ctx, opts, round, out); err != nil {
				return nil, err
			}
			left = next
		}
		return out, nil
	}
}

// readRound reads the batch at one offset of each partition of starts
// into out.
func readRound(ctx context.Context, opts []kgo.Opt, starts map[string]map[int32]int64, out map[batchAt]int16) error {
	offsets, left := map[string]map[int32]kgo.Offset{}, 0
	for t, ps := range starts {
		offsets[t] = map[int32]kgo.Offset{}
		for p, o := range ps {
			offsets[t][p] = kgo.NewOffset().At(o)
			left++
		}
	}
	if left == 0 {
		return nil
	}
	cl, err := kgo.NewClient(append(slices.Clone(opts),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()), kgo.ConsumePartitions(offsets))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		for _, fe := range fs.Errors() {
			if !kgo.IsRetryableBrokerErr(fe.Err) && !errors.Is(fe.Err, kerr.NotLeaderForPartition) &&
				!errors.Is(fe.Err, kerr.LeaderNotAvailable) {
				return fmt.Errorf("%s/%d: %w", fe.Topic, fe.Partition, fe.Err)
			}
		}
		for _, r := range fs.Records() {
			b := batchAt{r.Topic, r.Partition, starts[r.Topic][r.Partition]}
			if _, done := out[b]; done || r.Offset < b.offset {
				continue
			}
			if r.Offset != b.offset {
				// An open transaction's records are not compacted (the
				// cleaner stops at the last stable offset).
				return fmt.Errorf("%s/%d: the first record read is at offset %d, not %d", r.Topic, r.Partition, r.Offset, b.offset)
			}
			out[b] = r.ProducerEpoch
			cl.PauseFetchPartitions(map[string][]int32{r.Topic: {r.Partition}})
			left--
		}
	}
	return nil
}

// refuseMergedAbort fails with a *MergedTransactionError when aborting c,
// open at its coordinator, would abort an older transaction with it (see
// findMerged). Restore aborts the transactions of a checkpoint it walks
// back past, and a committed older one is a completed checkpoint's output.
func refuseMergedAbort(ctx context.Context, cl *kgo.Client, log *slog.Logger, c checkpoint.Committable) error {
	adm := kadm.NewClient(cl)
	before, err := describeBefore(ctx, adm, map[int]string{0: c.TransactionalID})
	if err != nil {
		return err
	}
	b, ok := before[0]
	if !ok || b.state != "Ongoing" || b.pid != c.ProducerID || b.epoch != c.Epoch || len(b.topics) == 0 {
		return nil // not open: aborting it ends nothing
	}
	ms, err := findMerged(ctx, log, adm, readFirstEpochs(cl.Opts()),
		[]openTxnAt{{txnID: c.TransactionalID, pid: c.ProducerID, epoch: c.Epoch, parts: b.topics, deadline: b.deadline}})
	var unchecked *uncheckedError
	switch {
	case errors.As(err, &unchecked):
		log.Warn(unchecked.Error()+"; aborting it unchecked", "transactional_id", c.TransactionalID)
		return nil
	case err != nil:
		return fmt.Errorf("before aborting transaction %s: %w", c.TransactionalID, err)
	case len(ms) > 0:
		return mergedError(ms)
	}
	return nil
}
