package sink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
)

// Status is what Check found for one committable.
type Status struct {
	Committable checkpoint.Committable
	Outcome     engine.CommitOutcome
	// State, ProducerID and Epoch are the coordinator's record of the
	// transactional id: a DescribeTransactions state ("Ongoing",
	// "CompleteCommit", ...), or "NotFound" when it has none.
	State      string
	ProducerID int64
	Epoch      int16
	// Probed says the record alone was not conclusive and an EndTxn
	// retry with the saved producer id and epoch decided (see Check).
	Probed bool
	// Refusal is the broker's answer to the last EndTxn that did not
	// commit (a probe or a resume), if any.
	Refusal error
	// Marker says what the output's log showed, when the coordinator
	// could not tell (a refused probe, a forgotten id) and the
	// committable names a record of the transaction (see fromLog): the
	// transaction's marker, or why it could not be found.
	Marker string
}

// LostError says a committable of a checkpoint names a transaction that can
// no longer commit: the checkpoint is invalid, restore must walk back to an
// earlier one (DESIGN.md: a checkpoint is valid only if its committables are
// committed or still committable).
type LostError struct {
	TransactionalID string
	ProducerID      int64
	Epoch           int16
	// State is the coordinator's state of the transactional id, with its
	// current producer id and epoch.
	State       string
	NowProducer int64
	NowEpoch    int16
	// ProbeFailure is the broker's refusal of an EndTxn with the saved
	// producer id and epoch, when one was sent.
	ProbeFailure error
	// Marker is what the output's log showed, if it was read
	// (Status.Marker).
	Marker string
}

// InvalidatesCheckpoint marks the error for callers that cannot import this
// package (the runtime): the checkpoint whose committables were restored is
// invalid, an earlier one may still be.
func (e *LostError) InvalidatesCheckpoint() bool { return true }

func (e *LostError) Error() string {
	s := fmt.Sprintf("transaction %s (producer id %d, epoch %d) is lost: the coordinator has it %s at producer id %d, epoch %d",
		e.TransactionalID, e.ProducerID, e.Epoch, e.State, e.NowProducer, e.NowEpoch)
	if e.ProbeFailure != nil {
		s += fmt.Sprintf(" and refused to commit it: %v", e.ProbeFailure)
	}
	if e.Marker != "" {
		s += "; the output's log shows its " + e.Marker
	}
	return s
}

// Check asks the transaction coordinators what became of each committable,
// without committing anything. The decision table, from the coordinator's
// record of the transactional id (DescribeTransactions) and the committable's
// producer id P and epoch E:
//
//	Ongoing at (P, E)                        Committable
//	PrepareCommit or CompleteCommit at P and
//	  E+1 (transaction.version 2), E (below)  Committed
//	PrepareAbort, CompleteAbort,
//	  PrepareEpochFence, Dead                 Lost
//	no record (TRANSACTIONAL_ID_NOT_FOUND),
//	  another producer id                     the output's log
//	anything else (Empty or Ongoing at a
//	  later epoch, a commit at a later one)   probe, then the output's log
//
// A probe sends EndTxn(commit) with (P, E), which can change nothing in
// these states: the broker answers success only to the retry of a commit it
// completed at exactly that epoch (Committed). A refusal looks the same
// whether the transaction aborted or committed and a later one began
// (PRODUCER_FENCED), so it is not evidence: the transaction's marker in
// the output's log decides (fromLog), for a committable that names one of
// its records; one of an older build that names none is Lost after a
// refusal and Unknown without a record. The record is asked first, not the
// log alone, because a transaction still open has no marker yet. A real
// broker with transaction protocol v2 answers most cases from the record;
// the probe and the log decide on brokers that do not keep Complete*
// states (kfake reports Empty after both a commit and an abort).
func Check(ctx context.Context, cl *kgo.Client, committables []checkpoint.Committable) ([]Status, error) {
	tv, err := transactionVersion(ctx, cl)
	if err != nil {
		return nil, err
	}
	out := make([]Status, 0, len(committables))
	for _, c := range committables {
		st, err := check(ctx, cl, tv, c)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

// Abort aborts each committable that is still open, with EndTxn at its
// saved producer id and epoch, and returns what became of each: Lost once
// aborted, Committed if its owner committed it first. Restore calls it for
// the transactions of a checkpoint it walks back past: from then on they
// can no longer commit, whoever still holds them, so the coordinator's
// record is final (DESIGN.md, "Decide what became of a committable from
// the transaction coordinator's own record"). log (nil: none) hears of an
// open transaction it aborts without the check for an older one in its
// range (see refuseMergedAbort).
func Abort(ctx context.Context, cl *kgo.Client, log *slog.Logger, committables []checkpoint.Committable) ([]Status, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tv, err := transactionVersion(ctx, cl)
	if err != nil {
		return nil, err
	}
	out := make([]Status, 0, len(committables))
	for _, c := range committables {
		if err := refuseMergedAbort(ctx, cl, log, c); err != nil {
			return nil, err
		}
		st, err := endOne(ctx, cl, tv, c, false)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

// Validate reports, joined, a *LostError for every committable that can no
// longer commit, and nil when all are committed or committable: whether a
// checkpoint holding these committables may be restored. It commits
// nothing. Errors other than *LostError mean the question could not be
// answered (the broker is unreachable, ...), not that the checkpoint is
// invalid.
func Validate(ctx context.Context, cl *kgo.Client, committables []checkpoint.Committable) error {
	sts, err := Check(ctx, cl, committables)
	if err != nil {
		return err
	}
	var errs []error
	for _, st := range sts {
		switch st.Outcome {
		case engine.CommitLost:
			errs = append(errs, st.lostError())
		case engine.CommitUnknown:
			errs = append(errs, st.unknownError())
		}
	}
	return errors.Join(errs...)
}

// ErrUnknownOutcome is wrapped by the error about a transaction the
// coordinator keeps no record of (Unknown).
var ErrUnknownOutcome = errors.New("the transaction coordinator keeps no record of the transaction")

func (st Status) unknownError() error {
	c := st.Committable
	err := fmt.Errorf("transaction %s (producer id %d, epoch %d): %w (it has the id %s at producer id %d, epoch %d): "+
		"whether it committed cannot be told", c.TransactionalID, c.ProducerID, c.Epoch, ErrUnknownOutcome, st.State, st.ProducerID, st.Epoch)
	if st.Marker != "" {
		err = fmt.Errorf("%w, nor from the output's log: %s", err, st.Marker)
	}
	return err
}

func (st Status) lostError() *LostError {
	return &LostError{
		TransactionalID: st.Committable.TransactionalID,
		ProducerID:      st.Committable.ProducerID,
		Epoch:           st.Committable.Epoch,
		State:           st.State,
		NowProducer:     st.ProducerID,
		NowEpoch:        st.Epoch,
		ProbeFailure:    st.Refusal,
		Marker:          st.Marker,
	}
}

// classify is the decision table of Check without the probe: ok false means
// the record is not conclusive.
func classify(tv int16, c checkpoint.Committable, state string, pid int64, epoch int16) (engine.CommitOutcome, bool) {
	committedEpoch := c.Epoch
	if tv >= 2 {
		// Under KIP-890 part 2 ending a transaction bumps the epoch.
		committedEpoch = c.Epoch + 1
	}
	switch {
	case state == stateNotFound, pid != c.ProducerID:
		// The coordinator forgot this producer's transactions: whether
		// ours committed is for checkpoint storage's record to say.
		return engine.CommitUnknown, true
	case state == "PrepareAbort", state == "CompleteAbort", state == "PrepareEpochFence", state == "Dead":
		return engine.CommitLost, true
	case state == "Ongoing" && epoch == c.Epoch:
		return engine.CommitResumable, true
	case (state == "PrepareCommit" || state == "CompleteCommit") && epoch == committedEpoch:
		return engine.CommitDone, true
	case epoch < c.Epoch:
		// The coordinator never goes back; this record is not of our
		// transaction's producer.
		return engine.CommitLost, true
	}
	return engine.CommitLost, false
}

const stateNotFound = "NotFound"

func check(ctx context.Context, cl *kgo.Client, tv int16, c checkpoint.Committable) (Status, error) {
	st := Status{Committable: c}
	state, pid, epoch, err := describe(ctx, cl, c.TransactionalID)
	if err != nil {
		return st, err
	}
	st.State, st.ProducerID, st.Epoch = state, pid, epoch
	o, ok := classify(tv, c, state, pid, epoch)
	st.Outcome = o
	if !ok {
		st.Probed = true
		perr, err := endTxn(ctx, cl, c, true)
		if err != nil {
			return st, err
		}
		st.Refusal = perr
		if perr == nil {
			st.Outcome = engine.CommitDone
			return st, nil
		}
	} else if o != engine.CommitUnknown {
		return st, nil
	}
	// A refused probe, or a coordinator that forgot the producer: the
	// output's log decides. A committable of an older build names no
	// record; its outcome stays what the coordinator said.
	if c.Record.Topic == "" {
		return st, nil
	}
	st.Outcome, st.Marker, err = fromLog(ctx, cl, c)
	return st, err
}

// fromLog decides what became of c from the output's own log, for when the
// coordinator's record no longer tells: its id was re-initialised after the
// transaction ended (under transaction protocol v2 the record then reads
// alike after a commit and after an abort), or it expired
// (transactional.id.expiration.ms). A transaction's records are
// followed, in every partition it wrote, by its marker: a control record of
// the same producer saying commit or abort, and the first control record of
// that producer after one of its records is that transaction's marker (the
// producer's next transaction begins only after it). So fromLog reads the
// partition from c.Record, uncommitted records and control records
// included:
//
//	the record at c.Record is not there, or is another producer's  Unknown
//	(retention or compaction removed it, the topic was recreated)
//	the producer's next control record says commit                 Committed
//	the producer's next control record says abort                  Lost
//
// It returns an error when the marker is not found within logReadTimeout
// (the broker is unreachable, or the marker is not yet replicated): the
// question could not be answered.
func fromLog(ctx context.Context, cl *kgo.Client, c checkpoint.Committable) (engine.CommitOutcome, string, error) {
	at := c.Record
	rd, err := kgo.NewClient(append(cl.Opts(),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{at.Topic: {at.Partition: kgo.NewOffset().At(at.Offset)}}),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()),
		kgo.KeepControlRecords(),
		kgo.ConsumeResetOffset(kgo.NoResetOffset()),
	)...)
	if err != nil {
		return 0, "", fmt.Errorf("kafka client to read the marker of transaction %s: %w", c.TransactionalID, err)
	}
	defer rd.Close()
	ctx, cancel := context.WithTimeout(ctx, logReadTimeout)
	defer cancel()
	where := fmt.Sprintf("%s/%d at offset %d", at.Topic, at.Partition, at.Offset)
	first := true
	var lastErr error
	for {
		fs := rd.PollFetches(ctx)
		if ctx.Err() != nil {
			return 0, "", fmt.Errorf("read %s for the marker of transaction %s (producer id %d): none found in %v (last error: %v)",
				where, c.TransactionalID, c.ProducerID, logReadTimeout, lastErr)
		}
		var gone error
		fs.EachError(func(_ string, _ int32, err error) {
			if errors.Is(err, kerr.OffsetOutOfRange) {
				gone = err
			}
			lastErr = err
		})
		if gone != nil {
			return engine.CommitUnknown, fmt.Sprintf("the log holds no record at %s (retention removed it, or the topic was recreated): %v", where, gone), nil
		}
		for it := fs.RecordIter(); !it.Done(); {
			r := it.Next()
			if first {
				first = false
				if r.Offset != at.Offset || r.ProducerID != c.ProducerID || r.Attrs.IsControl() {
					return engine.CommitUnknown, fmt.Sprintf("the record at %s is not the transaction's: the log has producer id %d at offset %d there",
						where, r.ProducerID, r.Offset), nil
				}
			}
			if r.ProducerID != c.ProducerID || !r.Attrs.IsControl() {
				continue
			}
			var key kmsg.ControlRecordKey
			if err := key.ReadFrom(r.Key); err != nil {
				return 0, "", fmt.Errorf("the marker of transaction %s at %s/%d offset %d: %w", c.TransactionalID, at.Topic, at.Partition, r.Offset, err)
			}
			switch key.Type {
			case kmsg.ControlRecordKeyTypeCommit:
				return engine.CommitDone, fmt.Sprintf("commit marker at offset %d after its record at %s", r.Offset, where), nil
			case kmsg.ControlRecordKeyTypeAbort:
				return engine.CommitLost, fmt.Sprintf("abort marker at offset %d after its record at %s", r.Offset, where), nil
			}
		}
	}
}

// logReadTimeout bounds fromLog.
const logReadTimeout = 30 * time.Second

// describe returns the coordinator's record of a transactional id, retrying
// while the coordinator moves or loads.
func describe(ctx context.Context, cl *kgo.Client, txnID string) (state string, pid int64, epoch int16, err error) {
	adm := kadm.NewClient(cl)
	for b := newBackoff(); ; {
		ds, err := adm.DescribeTransactions(ctx, txnID)
		var d kadm.DescribedTransaction
		if err == nil {
			var ok bool
			if d, ok = ds[txnID]; !ok {
				err = fmt.Errorf("no answer for %s", txnID)
			} else {
				err = d.Err
			}
		}
		switch {
		case err == nil:
			return d.State, d.ProducerID, d.ProducerEpoch, nil
		case errors.Is(err, kerr.TransactionalIDNotFound):
			return stateNotFound, -1, -1, nil
		case retriableCoordinator(err):
			if werr := b.wait(ctx); werr != nil {
				return "", 0, 0, fmt.Errorf("describe transaction %s: %w (last error: %v)", txnID, werr, err)
			}
		default:
			return "", 0, 0, fmt.Errorf("describe transaction %s: %w", txnID, err)
		}
	}
}

// endTxn sends EndTxn with the committable's producer id and epoch through
// cl, which routes it to the transaction coordinator, retrying while the
// coordinator is busy, moving or loading. It returns the broker's final
// refusal as refused, and transport failures (the outcome unknown) as err.
func endTxn(ctx context.Context, cl *kgo.Client, c checkpoint.Committable, commit bool) (refused, err error) {
	for b := newBackoff(); ; {
		req := kmsg.NewPtrEndTxnRequest()
		req.TransactionalID = c.TransactionalID
		req.ProducerID = c.ProducerID
		req.ProducerEpoch = c.Epoch
		req.Commit = commit
		resp, err := req.RequestWith(ctx, cl)
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
			if err == nil {
				return nil, nil
			}
			if !retriableCoordinator(err) {
				return err, nil
			}
		}
		if werr := b.wait(ctx); werr != nil {
			return nil, fmt.Errorf("end transaction %s: %w (last error: %v)", c.TransactionalID, werr, err)
		}
	}
}

// retriableCoordinator: the coordinator is busy with the transaction (a
// previous end is still writing markers), moving, loading, or the request
// did not reach it.
func retriableCoordinator(err error) bool {
	switch {
	case errors.Is(err, kerr.ConcurrentTransactions),
		errors.Is(err, kerr.CoordinatorLoadInProgress),
		errors.Is(err, kerr.NotCoordinator),
		errors.Is(err, kerr.CoordinatorNotAvailable),
		errors.Is(err, kerr.RequestTimedOut):
		return true
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return false // any other Kafka error is the broker's answer
	}
	return kgo.IsRetryableBrokerErr(err)
}

// commitRestored brings every restored committable to Committed: it resumes
// the open ones with EndTxn at their saved producer id and epoch, and
// re-asks the coordinator until its record shows the commit. It returns a
// *LostError (joined, one per transaction) when any cannot commit, and an
// error wrapping ErrUnknownOutcome for one the coordinator forgot (the
// restore that chose these committables found them resumable or committed;
// the coordinator forgot them since).
func commitRestored(ctx context.Context, cl *kgo.Client, committables []checkpoint.Committable) ([]Status, error) {
	tv, err := transactionVersion(ctx, cl)
	if err != nil {
		return nil, err
	}
	var (
		out  []Status
		lost []error
	)
	for _, c := range committables {
		st, err := commitOne(ctx, cl, tv, c)
		if err != nil {
			return nil, err
		}
		switch st.Outcome {
		case engine.CommitLost:
			lost = append(lost, st.lostError())
			continue
		case engine.CommitUnknown:
			lost = append(lost, st.unknownError())
			continue
		}
		out = append(out, st)
	}
	return out, errors.Join(lost...)
}

func commitOne(ctx context.Context, cl *kgo.Client, tv int16, c checkpoint.Committable) (Status, error) {
	return endOne(ctx, cl, tv, c, true)
}

// endOne ends c (commit or abort) if it is still open and returns the
// coordinator's record of it once it is not.
func endOne(ctx context.Context, cl *kgo.Client, tv int16, c checkpoint.Committable, commit bool) (Status, error) {
	verb := "resume"
	if !commit {
		verb = "abort"
	}
	// Each round asks the record first; an end that the broker refused
	// (or whose answer was lost) is judged by the next round's record, not
	// by the refusal.
	const rounds = 10
	var refusal error
	for range rounds {
		st, err := check(ctx, cl, tv, c)
		if err != nil {
			return st, err
		}
		if st.Outcome != engine.CommitResumable {
			if st.Refusal == nil {
				st.Refusal = refusal
			}
			return st, nil
		}
		refused, err := endTxn(ctx, cl, c, commit)
		if err != nil {
			return st, fmt.Errorf("%s transaction %s: %w", verb, c.TransactionalID, err)
		}
		refusal = refused
	}
	return Status{}, fmt.Errorf("%s transaction %s (producer id %d, epoch %d): still open after %d attempts, last refusal: %v",
		verb, c.TransactionalID, c.ProducerID, c.Epoch, rounds, refusal)
}

// transactionVersion is the cluster's finalized transaction.version feature
// level (0 when the broker does not report it).
// TransactionVersion returns the transaction version the cluster of cl
// has finalised (its transaction.version feature): 2 for transactions of
// KIP-890 part 2, where each transaction of a producer id has an epoch of
// its own; 0 or 1 before.
func TransactionVersion(ctx context.Context, cl *kgo.Client) (int16, error) {
	return transactionVersion(ctx, cl)
}

func transactionVersion(ctx context.Context, cl *kgo.Client) (int16, error) {
	req := kmsg.NewPtrApiVersionsRequest()
	req.ClientSoftwareName = "weir"
	req.ClientSoftwareVersion = "0"
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, fmt.Errorf("api versions: %w", err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return 0, fmt.Errorf("api versions: %w", err)
	}
	for _, f := range resp.FinalizedFeatures {
		if f.Name == "transaction.version" {
			return f.MaxVersionLevel, nil
		}
	}
	return 0, nil
}

// backoff waits 50ms, doubling up to 1s, between retries of one request.
type backoff struct{ d time.Duration }

func newBackoff() *backoff { return &backoff{d: 50 * time.Millisecond} }

func (b *backoff) wait(ctx context.Context) error {
	t := time.NewTimer(b.d)
	defer t.Stop()
	b.d = min(2*b.d, time.Second)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
