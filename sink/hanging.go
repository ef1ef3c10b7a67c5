package sink

import (
	"context"
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
)

// Hanging transactions. When a transaction ends, its coordinator writes a
// marker to each partition the transaction wrote. A partition with no
// leader at that moment is taken for deleted and skipped (Kafka 4.4's
// TransactionMarkerChannelManager: "Couldn't find leader endpoint ...
// likely deleted already and hence can be skipped"); the coordinator
// completes the transaction without that marker. The partition then holds
// the transaction open: its last stable offset stops there, and the next
// transaction of the same producer id to write the partition is taken for
// its continuation, so that its marker decides the records of both.
//
// The chaos runner found it (seed 23001, 20 minutes, a broker fenced by its
// controller under load): worker 1 was killed with a transaction of task 1
// open; the next owner's InitProducerID aborted it, the abort's marker for
// the partition was skipped, and the next owner's first transaction on that
// transactional id committed the dead owner's nine records along with its
// own. The restore had replayed them from the checkpoint: nine duplicates,
// nothing said. Flink's and Kafka Streams' sinks meet the same.
//
// A writer opens its slots with InitProducerID, which aborts what a
// previous owner left open. closeHanging checks, after that, every
// partition of the sink's topics for a transaction still open under the
// slot's producer id at an older epoch. Not only those the coordinator
// names (DescribeTransactions, before the slots are initialised): it drops
// a partition from a transaction's as soon as it skips the partition's
// marker, while the transaction is still preparing to end, and an older
// owner still running may add partitions to an Ongoing one after the
// record was read. One the coordinator decided (the previous owner's
// open transaction, which the InitProducerID aborted; or one it was
// preparing to commit or abort) gets the marker it missed, written as
// kafka-transactions.sh abort writes one (WriteTxnMarkers, KIP-664), before
// the slot writes again. One whose outcome it cannot tell fails the writer,
// naming the partition and offset.
//
// An older owner still running may commit its transaction between the
// record's reading and the initialisation: then the record says Ongoing
// and the transaction committed. It writes its checkpoint before it
// commits, after this owner listed them; so before taking an Ongoing
// transaction for aborted, closeHanging asks whether a checkpoint
// completed since (engine.TaskInfo.NewerCheckpoint) and, if one did,
// fails instead: the restart restores that checkpoint, whose restore
// commits the transaction, and the check at the slot's re-initialisation
// writes its commit marker.

// txnBefore is the coordinator's record of a slot's transactional id
// before the writer initialised it.
type txnBefore struct {
	state string
	pid   int64
	epoch int16
	// topics are the partitions of its transaction, if one was open
	// (Ongoing, or preparing to end: then those still waiting for their
	// markers, not one whose marker was skipped).
	topics kadm.TopicsSet
	// deadline is when its coordinator aborts an Ongoing transaction (its
	// start plus its timeout); zero if not Ongoing or not told.
	deadline time.Time
}

// hangingTxn is a transaction a partition holds open under a slot's
// producer id after the slot was initialised (at a newer epoch).
type hangingTxn struct {
	slot             int
	txnID            string
	topic            string
	partition        int32
	pid              int64
	epoch            int16 // of its records
	coordinatorEpoch int32
	start            int64 // its first offset
	// decided: the coordinator's record before initialisation tells the
	// outcome, commit.
	decided, commit bool
	before          txnBefore
}

func (h hangingTxn) String() string {
	return fmt.Sprintf("%s/%d from offset %d (transactional id %s, producer id %d, epoch %d)",
		h.topic, h.partition, h.start, h.txnID, h.pid, h.epoch)
}

// decide sets what the coordinator decided for h from its record before
// the slot was initialised:
//   - Ongoing at h's epoch, with h's partition among its partitions: the
//     transaction the initialisation aborted.
//   - Preparing to end or ended at the epoch after h's: ending a
//     transaction takes the next epoch under transaction version 2, so
//     that epoch names exactly the transaction that wrote at h's; it
//     committed or aborted as the state says.
//
// Anything else (another producer id, an older transaction, the epochs of
// transaction version 1, where every transaction of a producer shares
// one) is left undecided.
func (h *hangingTxn) decide() {
	b := h.before
	if b.pid != h.pid {
		return
	}
	switch {
	case b.state == "Ongoing" && b.epoch == h.epoch && b.topics.Lookup(h.topic, h.partition):
		h.decided, h.commit = true, false
	case (b.state == "PrepareAbort" || b.state == "CompleteAbort") && b.epoch == h.epoch+1:
		h.decided, h.commit = true, false
	case (b.state == "PrepareCommit" || b.state == "CompleteCommit") && b.epoch == h.epoch+1:
		h.decided, h.commit = true, true
	}
}

// findHanging returns the transactions ps shows open under a slot's
// producer id (pids, per slot) at an epoch older than the slot's (epochs),
// for the slots of before, decided where their record tells.
func findHanging(ids []string, pids []int64, epochs []int16, before map[int]txnBefore, ps []kadm.DescribedProducer) []hangingTxn {
	var out []hangingTxn
	for slot, b := range before {
		for _, p := range ps {
			if p.ProducerID != pids[slot] || p.CurrentTxnStartOffset < 0 || p.ProducerEpoch >= epochs[slot] {
				continue
			}
			h := hangingTxn{slot: slot, txnID: ids[slot], topic: p.Topic, partition: p.Partition, pid: p.ProducerID,
				epoch: p.ProducerEpoch, coordinatorEpoch: p.CoordinatorEpoch, start: p.CurrentTxnStartOffset, before: b}
			h.decide()
			out = append(out, h)
		}
	}
	slices.SortFunc(out, func(a, b hangingTxn) int {
		return strings.Compare(a.String(), b.String())
	})
	return out
}

// mergedHanging returns those of hs whose open range began at an older
// epoch than its newest batch's (h.epoch, what DescribeProducers tells):
// a marker skipped for an older transaction, and a later one of the same
// producer id that wrote the partition and continued the range (see
// merged.go). One marker ends the whole range, so no marker is right for
// it: the two transactions' outcomes may differ.
func mergedHanging(ctx context.Context, firstEpochs firstEpochsFunc, hs []hangingTxn) ([]mergedTxn, error) {
	at := make([]batchAt, len(hs))
	for i, h := range hs {
		at[i] = batchAt{h.topic, h.partition, h.start}
	}
	first, err := firstEpochs(ctx, at)
	if err != nil {
		return nil, err
	}
	var out []mergedTxn
	for _, h := range hs {
		e, ok := first[batchAt{h.topic, h.partition, h.start}]
		if !ok {
			return nil, fmt.Errorf("no first batch read for %v", h)
		}
		if e < h.epoch {
			out = append(out, mergedTxn{txnID: h.txnID, topic: h.topic, partition: h.partition, pid: h.pid, start: h.start, firstEpoch: e, epoch: h.epoch})
		}
	}
	return out, nil
}

// hangingAdmin is what closeHanging asks the brokers (kadm.Client; tests
// fake it).
type hangingAdmin interface {
	Metadata(ctx context.Context, topics ...string) (kadm.Metadata, error)
	DescribeProducers(ctx context.Context, s kadm.TopicsSet) (kadm.DescribedProducersTopics, error)
	WriteTxnMarkers(ctx context.Context, markers ...kadm.TxnMarkers) (kadm.TxnMarkersResponses, error)
}

// HangingTransactionError says an output partition holds open a
// transaction of the task's that its coordinator ended without the
// partition's marker, and the writer could not close it: writing on would
// let the next transaction decide its records (see closeHanging).
type HangingTransactionError struct {
	Hanging []string // each as topic/partition from offset ...
	Reason  string
	// Abort lists kafka-transactions.sh commands that abort them, if
	// aborting is right (the coordinator aborted them).
	Abort []string
}

func (e *HangingTransactionError) Error() string {
	s := fmt.Sprintf("output partitions hold transactions open that their coordinator ended without writing the partition's marker (a partition without a leader at that moment): %s; %s. "+
		"Writing on would commit or abort their records with the next transaction of the same producer id",
		strings.Join(e.Hanging, "; "), e.Reason)
	if len(e.Abort) > 0 {
		s += "; the coordinator aborted them: abort them with " + strings.Join(e.Abort, " and ") + ", and the task goes on at its next restart"
	}
	return s
}

// closeHanging writes the markers the output's partitions missed, once
// the slots are initialised (pids and epochs, per slot), or fails with a
// *HangingTransactionError (see the top of this file). It looks wherever a
// slot's transactions may have written: every partition of topics (the
// sink's), and any other its coordinator names, whatever the state of the
// slot's record but Dead (Empty included: a transaction that missed its
// marker before an earlier start of the task, whose check then did not
// finish, is still open; what became of it is no longer on record, and it
// is found and left undecided).
// It returns what it closed.
func closeHanging(ctx context.Context, log *slog.Logger, adm hangingAdmin, firstEpochs firstEpochsFunc, newer func(context.Context) (bool, error), topics []string, ids []string, pids []int64, epochs []int16, before map[int]txnBefore) ([]hangingTxn, error) {
	parts, relevant := kadm.TopicsSet{}, map[int]txnBefore{}
	for slot, b := range before {
		if b.pid != pids[slot] || b.state == "Dead" {
			continue // another producer id now, or soon (expired): its transactions are not continued
		}
		relevant[slot] = b
		parts.Merge(b.topics)
	}
	if len(relevant) == 0 {
		return nil, nil
	}
	for _, t := range topics {
		parts[t] = map[int32]struct{}{} // none named: kadm asks for all
	}
	before = relevant
	described := func() ([]kadm.DescribedProducer, error) { return describeWaiting(ctx, log, adm, parts) }
	ps, err := described()
	if err != nil {
		if errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed) {
			return nil, &uncheckedError{err}
		}
		return nil, err
	}
	hs := findHanging(ids, pids, epochs, before, ps)
	if len(hs) == 0 {
		return nil, nil
	}
	if ms, err := mergedHanging(ctx, firstEpochs, hs); err != nil || len(ms) > 0 {
		if err != nil {
			return nil, fmt.Errorf("read the first batches of %v: %w", hs, err)
		}
		return nil, mergedError(ms)
	}
	var undecided []string
	for _, h := range hs {
		if !h.decided {
			undecided = append(undecided, fmt.Sprintf("%v, whose coordinator had it %s at producer id %d, epoch %d before the task initialised it",
				h, h.before.state, h.before.pid, h.before.epoch))
		}
	}
	if len(undecided) > 0 {
		return nil, &HangingTransactionError{Hanging: undecided, Reason: "which of them committed cannot be told, so none is closed"}
	}
	// The transaction Ongoing before the initialisation was aborted by it,
	// unless an older owner still running committed it first: then it
	// wrote a checkpoint after this owner listed them, before the commit
	// (see the top of this file).
	if newer != nil && slices.ContainsFunc(hs, func(h hangingTxn) bool { return h.before.state == "Ongoing" }) {
		switch n, err := newer(ctx); {
		case err != nil:
			return nil, fmt.Errorf("before closing %v: %w", hs, err)
		case n:
			return nil, fmt.Errorf("%w: a checkpoint completed after this owner listed them, so an older owner may have committed %v; "+
				"the task restarts and restores it", ErrNewerCheckpoint, hs)
		}
	}
	var markers []kadm.TxnMarkers
	for _, h := range hs {
		markers = append(markers, kadm.TxnMarkers{ProducerID: h.pid, ProducerEpoch: h.epoch, Commit: h.commit,
			CoordinatorEpoch: h.coordinatorEpoch, Topics: kadm.TopicsSet{h.topic: {h.partition: {}}}})
	}
	rs, err := adm.WriteTxnMarkers(ctx, markers...)
	if err == nil {
		var perr []error
		rs.EachPartition(func(p kadm.TxnMarkersPartitionResponse) {
			if p.Err != nil {
				perr = append(perr, fmt.Errorf("%s/%d (producer id %d): %w", p.Topic, p.Partition, p.ProducerID, p.Err))
			}
		})
		err = errors.Join(perr...)
	}
	if err == nil {
		// The markers are in: nothing of these may be open now.
		if ps, err = described(); err == nil {
			if still := findHanging(ids, pids, epochs, before, ps); len(still) > 0 {
				err = fmt.Errorf("still open after their markers were written: %v", still)
			}
		}
	}
	if err != nil {
		e := &HangingTransactionError{Reason: fmt.Sprintf("writing their markers failed: %v", err)}
		for _, h := range hs {
			e.Hanging = append(e.Hanging, h.String())
			if !h.commit {
				e.Abort = append(e.Abort, fmt.Sprintf("`kafka-transactions.sh --bootstrap-server BROKERS abort --topic %s --partition %d --start-offset %d`",
					h.topic, h.partition, h.start))
			}
		}
		if len(e.Abort) < len(hs) {
			e.Abort = nil // a commit among them: no tool writes one
		}
		return nil, e
	}
	return hs, nil
}

// describeBefore returns the coordinator's record of each slot's
// transactional id (ids, by slot), retrying while coordinators move or
// load. An id the coordinator does not know has no record.
func describeBefore(ctx context.Context, adm *kadm.Client, ids map[int]string) (map[int]txnBefore, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	var names []string
	for _, id := range ids {
		names = append(names, id)
	}
	for b := newBackoff(); ; {
		ds, err := adm.DescribeTransactions(ctx, names...)
		out := map[int]txnBefore{}
		if err == nil {
			for slot, id := range ids {
				d, ok := ds[id]
				switch {
				case !ok:
					err = fmt.Errorf("no answer for %s", id)
				case errors.Is(d.Err, kerr.TransactionalIDNotFound):
				case d.Err != nil:
					err = d.Err
				default:
					b := txnBefore{state: d.State, pid: d.ProducerID, epoch: d.ProducerEpoch, topics: d.Topics}
					if d.State == "Ongoing" && d.StartTimestamp > 0 && d.TimeoutMillis > 0 {
						b.deadline = time.UnixMilli(d.StartTimestamp + int64(d.TimeoutMillis))
					}
					out[slot] = b
				}
				if err != nil {
					break
				}
			}
		}
		switch {
		case err == nil:
			return out, nil
		case retriableCoordinator(err):
			if werr := b.wait(ctx); werr != nil {
				return nil, fmt.Errorf("describe transactional ids %s: %w (last error: %v)", strings.Join(names, ", "), werr, err)
			}
		default:
			return nil, fmt.Errorf("describe transactional ids %s: %w", strings.Join(names, ", "), err)
		}
	}
}

// ErrNewerCheckpoint says a checkpoint completed after the task listed
// them: the task must restart and restore it.
var ErrNewerCheckpoint = errors.New("a newer checkpoint completed")

// uncheckedError says closeHanging could not look (the principal may not
// read the output topic's producers): the writer goes on, with a warning.
type uncheckedError struct{ err error }

func (e *uncheckedError) Error() string {
	return fmt.Sprintf("could not check the output's partitions for transactions left open by a marker their coordinator skipped: %v", e.err)
}

func (e *uncheckedError) Unwrap() error { return e.err }

// describeWarnAfter is how long closeHanging waits for the partitions to
// answer (a partition without a leader does not) before it says so.
const describeWarnAfter = 10 * time.Second

// describeProducers returns the producers the partitions of parts know; a
// topic of parts without partitions stands for all of its partitions.
func describeProducers(ctx context.Context, adm hangingAdmin, parts kadm.TopicsSet) ([]kadm.DescribedProducer, error) {
	parts, err := everyPartition(ctx, adm, parts)
	if err != nil {
		return nil, err
	}
	if len(parts) == 0 {
		return nil, nil
	}
	ds, err := adm.DescribeProducers(ctx, parts)
	if err != nil {
		return nil, fmt.Errorf("describe the producers of %s: %w", strings.Join(parts.Topics(), ", "), err)
	}
	var all []kadm.DescribedProducer
	var perr []error
	ds.EachPartition(func(p kadm.DescribedProducersPartition) {
		if p.Err != nil {
			perr = append(perr, fmt.Errorf("%s/%d: %w", p.Topic, p.Partition, p.Err))
		}
		for _, d := range p.ActiveProducers {
			all = append(all, d)
		}
	})
	if len(perr) > 0 {
		return nil, fmt.Errorf("describe producers: %w", errors.Join(perr...))
	}
	return all, nil
}

// everyPartition returns parts with each topic that names no partition
// given all of its partitions, from the topic's metadata. kadm's
// DescribeProducers fills such a topic itself, but a topic whose metadata
// fails (no leader yet, a broker moving) comes back from it with no
// partition and no error, and the check would pass having asked nothing.
// Here a topic that does not exist is dropped (it holds nothing open: an
// output topic is created by its first write), and any other failure is
// returned.
func everyPartition(ctx context.Context, adm hangingAdmin, parts kadm.TopicsSet) (kadm.TopicsSet, error) {
	var all []string
	for t, ps := range parts {
		if len(ps) == 0 {
			all = append(all, t)
		}
	}
	if len(all) == 0 {
		return parts, nil
	}
	slices.Sort(all)
	m, err := adm.Metadata(ctx, all...)
	if err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", strings.Join(all, ", "), err)
	}
	out := kadm.TopicsSet{}
	for t, ps := range parts {
		if len(ps) > 0 {
			out.Add(t, slices.Collect(maps.Keys(ps))...)
		}
	}
	for _, t := range all {
		d, ok := m.Topics[t]
		switch {
		case !ok:
			return nil, fmt.Errorf("metadata of %s: no answer for the topic: %w", t, kerr.LeaderNotAvailable)
		case errors.Is(d.Err, kerr.UnknownTopicOrPartition):
			// Not made yet: nothing to ask.
		case d.Err != nil:
			return nil, fmt.Errorf("metadata of %s: %w", t, d.Err)
		case len(d.Partitions) == 0:
			return nil, fmt.Errorf("metadata of %s: no partitions: %w", t, kerr.LeaderNotAvailable)
		default:
			for p := range d.Partitions {
				out.Add(t, p)
			}
		}
	}
	return out, nil
}

// describeWaiting is describeProducers asked until the partitions answer.
// A partition without a leader does not: it waits for it, however long
// (bounded by ctx), rather than fail. A failed check leaves no record of
// what it was checking; the next start would find the transaction and be
// unable to tell its outcome.
func describeWaiting(ctx context.Context, log *slog.Logger, adm hangingAdmin, parts kadm.TopicsSet) ([]kadm.DescribedProducer, error) {
	start, warned := time.Now(), false
	for bo := newBackoff(); ; {
		all, err := describeProducers(ctx, adm, parts)
		if err == nil || !retriableDescribe(err) {
			return all, err
		}
		if !warned && time.Since(start) > describeWarnAfter {
			log.Warn("waiting for the output's partitions to answer before writing (checking for transactions left open by a skipped marker)", "err", err)
			warned = true
		}
		if werr := bo.wait(ctx); werr != nil {
			return nil, fmt.Errorf("%w (last error: %v)", werr, err)
		}
	}
}

// retriableDescribe tells a DescribeProducers failure worth asking again:
// a partition or topic without a leader, or one moving (any error Kafka
// calls retriable).
func retriableDescribe(err error) bool {
	switch {
	case errors.Is(err, kerr.NotLeaderForPartition), errors.Is(err, kerr.LeaderNotAvailable),
		errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.RequestTimedOut):
		return true
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Retriable // a topic's metadata: no leader yet, say
	}
	return kgo.IsRetryableBrokerErr(err)
}
