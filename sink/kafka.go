package sink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
)

// KafkaSink is a Kafka sink of a job: it opens each task's writer
// (engine.SinkOpener) and, with exactly-once delivery, tells a restore
// what became of its writers' transactions (engine.Committer), from the
// transaction coordinator's record.
type KafkaSink[T any] struct{ cfg Config[T] }

// Kafka validates cfg (every bad setting is reported, joined) and returns
// the sink.
func Kafka[T any](cfg Config[T]) (*KafkaSink[T], error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("kafka sink: %w", err)
	}
	cfg.Brokers = append([]string(nil), cfg.Brokers...)
	cfg.Topics = append([]string(nil), cfg.Topics...)
	cfg.ClientOpts = append([]kgo.Opt(nil), cfg.ClientOpts...)
	return &KafkaSink[T]{cfg: cfg}, nil
}

// Topics returns the topics the sink writes, which a task's start asks for
// transactions left open: Config.Topic, then Config.Topics.
func (k *KafkaSink[T]) Topics() []string { return k.cfg.checkedTopics() }

// Open implements engine.SinkOpener: the writer of one task. With
// exactly-once delivery it commits restored first, then initialises every
// transactional id of the task's pool (recovery order, see DESIGN.md).
func (k *KafkaSink[T]) Open(ctx context.Context, info engine.TaskInfo, restored []checkpoint.Committable) (engine.SinkWriter[T], error) {
	cfg := k.cfg
	log := info.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	switch cfg.delivery() {
	case AtLeastOnce, None:
		if len(restored) > 0 {
			return nil, fmt.Errorf("kafka sink %s: the restored checkpoint holds %d transactions of an exactly-once sink, but Delivery is %q; restore with %q once to commit them",
				info.Operator, len(restored), cfg.Delivery, ExactlyOnce)
		}
		return openPlain(cfg, info, log)
	}
	return openTxn(ctx, cfg, info, log, restored)
}

// CheckCommittables implements engine.Committer with Check.
func (k *KafkaSink[T]) CheckCommittables(ctx context.Context, cs []checkpoint.Committable) ([]engine.CommitOutcome, error) {
	return k.ask(ctx, cs, Check)
}

// AbortCommittables implements engine.Committer with Abort.
func (k *KafkaSink[T]) AbortCommittables(ctx context.Context, log *slog.Logger, cs []checkpoint.Committable) ([]engine.CommitOutcome, error) {
	return k.ask(ctx, cs, func(ctx context.Context, cl *kgo.Client, cs []checkpoint.Committable) ([]Status, error) {
		return Abort(ctx, cl, log, cs)
	})
}

// ask runs f with a client of its own: restores are rare.
func (k *KafkaSink[T]) ask(ctx context.Context, cs []checkpoint.Committable, f func(context.Context, *kgo.Client, []checkpoint.Committable) ([]Status, error)) ([]engine.CommitOutcome, error) {
	if len(cs) == 0 {
		return nil, nil
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(k.cfg.Brokers...)}, k.cfg.ClientOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	sts, err := f(ctx, cl, cs)
	if err != nil {
		return nil, err
	}
	out := make([]engine.CommitOutcome, len(sts))
	for i, st := range sts {
		out[i] = st.Outcome
	}
	return out, nil
}

// TransactionalIDs returns the pool of transactional ids of one task of an
// exactly-once sink: "<prefix>-<task>-<slot>" for slot 0..poolSize-1.
func TransactionalIDs(prefix string, task, poolSize int) []string {
	ids := make([]string, poolSize)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d-%d", prefix, task, i)
	}
	return ids
}

// DefaultTransactionalIDPrefix is the prefix used when
// Config.TransactionalIDPrefix is empty: "<job>-<operator>".
func DefaultTransactionalIDPrefix(job, operator string) string { return job + "-" + operator }

// asyncErr keeps the first error of a produce promise; promises run on
// franz-go's goroutines. get is on every Write's path: a load, no lock.
type asyncErr struct {
	err atomic.Pointer[error]
}

func (a *asyncErr) set(err error) {
	if err != nil {
		a.err.CompareAndSwap(nil, &err)
	}
}

func (a *asyncErr) get() error {
	if p := a.err.Load(); p != nil {
		return *p
	}
	return nil
}

// --- exactly-once ------------------------------------------------------------

type txnWriter[T any] struct {
	cfg  Config[T]
	info engine.TaskInfo
	log  *slog.Logger
	ids  []string

	clients []*kgo.Client // per slot; nil until initialised
	// pids and epochs are, per slot, the producer id and epoch its last
	// initialisation got.
	pids    []int64
	epochs  []int16
	pool    *pool
	cur     int // the slot of the open transaction, -1 for none
	written int // records written into it
	failed  asyncErr
	marks   marks
	// promises are, per slot, the produce callbacks: made once, not per
	// record.
	promises []func(*kgo.Record, error)
	gate     *inflightGate
	// leaveBudget takes the writer out of its InFlightBudget (nil: none).
	leaveBudget func()
	clientID    string
	// topics are the topics the open transaction wrote, and loaded, per
	// slot, the topics whose partitions its client has stored (see
	// awaitTopicsLoaded).
	topics []string
	loaded []map[string]bool
	// warned are the topics outside Config.Topic and Topics this writer
	// wrote, and warned of.
	warned map[string]bool
	// landed are, per slot, where the first acknowledged record of its
	// transaction landed: the committable's evidence (checkpoint.RecordAt).
	landed []firstRecord
}

// firstRecord keeps the position of the first record a produce promise
// acknowledged: set once per transaction by franz-go's goroutines, read
// and reset by the writer after the flush (no promise of the slot runs
// then).
type firstRecord struct {
	set atomic.Bool
	mu  sync.Mutex
	at  checkpoint.RecordAt
}

func (f *firstRecord) note(r *kgo.Record) {
	if f.set.Load() {
		return
	}
	f.mu.Lock()
	if !f.set.Load() {
		f.at = checkpoint.RecordAt{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}
		f.set.Store(true)
	}
	f.mu.Unlock()
}

func (f *firstRecord) take() checkpoint.RecordAt {
	f.mu.Lock()
	defer f.mu.Unlock()
	at := f.at
	f.at = checkpoint.RecordAt{}
	f.set.Store(false)
	return at
}

func openTxn[T any](ctx context.Context, cfg Config[T], info engine.TaskInfo, log *slog.Logger, restored []checkpoint.Committable) (_ *txnWriter[T], err error) {
	prefix := cfg.TransactionalIDPrefix
	if prefix == "" {
		prefix = DefaultTransactionalIDPrefix(info.Job, info.Operator)
	}
	w := &txnWriter[T]{
		cfg:  cfg,
		info: info,
		log:  log,
		ids:  TransactionalIDs(prefix, info.Task, cfg.poolSize()),
		// One client id per task ("<prefix>-<task>"), shared by its slots
		// (one writes at a time): the broker's quotas and logs tell tasks
		// apart, as Flink's per-subtask and Kafka Streams' per-thread
		// producer client ids do.
		clientID: fmt.Sprintf("%s-%d", prefix, info.Task),
		clients:  make([]*kgo.Client, cfg.poolSize()),
		pids:     make([]int64, cfg.poolSize()),
		epochs:   make([]int16, cfg.poolSize()),
		loaded:   make([]map[string]bool, cfg.poolSize()),
		landed:   make([]firstRecord, cfg.poolSize()),
		pool:     newPool(cfg.poolSize()),
		cur:      -1,
		marks:    newMarks(cfg, info),
		gate:     newInflightGate(cfg.FlushTarget, maxInFlight, time.Now),
	}
	if cfg.InFlight != nil && cfg.FlushTarget > 0 {
		w.gate.budget = cfg.InFlight
		w.leaveBudget = cfg.InFlight.join()
	}
	for i, id := range w.ids {
		w.promises = append(w.promises, func(r *kgo.Record, err error) {
			if err != nil {
				w.failed.set(fmt.Errorf("an earlier record (%d bytes) to %s/%d failed in transaction %s: %w",
					len(r.Key)+len(r.Value), r.Topic, r.Partition, id, err))
			} else {
				w.landed[i].note(r)
			}
			// Counted after the failure is set: a pre-commit whose drain
			// saw this record done sees its failure too.
			w.gate.done()
			recycle(r)
		})
	}
	defer func() {
		if err != nil {
			w.closeClients()
		}
	}()

	// Recovery, step 1: commit what the restored manifest names.
	if len(restored) > 0 {
		if err := w.recover(ctx, restored); err != nil {
			return nil, fmt.Errorf("kafka sink %s, task %d: recover %d committables: %w", info.Operator, info.Task, len(restored), err)
		}
	}
	// Step 2: initialise every other slot afresh. InitProducerID bumps the
	// epoch: it fences a zombie owner's producer and aborts any
	// transaction left open after the checkpoint. The restored slots are
	// re-initialised at the first completed checkpoint instead (see
	// pool.complete): until then the coordinator's record of them is the
	// only evidence that they committed, and a restore from the same
	// manifest after another failure needs it.
	//
	// What the coordinator has of each first: a transaction it aborts
	// there may miss a partition's marker (see hanging.go).
	var fresh []int
	for i := range w.ids {
		if w.pool.slots[i].state != slotRestored {
			fresh = append(fresh, i)
		}
	}
	if err := w.initChecked(ctx, fresh, info.NewerCheckpoint); err != nil {
		return nil, fmt.Errorf("kafka sink %s, task %d: %w", info.Operator, info.Task, err)
	}
	w.lookupQuota(ctx)
	w.openNext()
	return w, nil
}

func (w *txnWriter[T]) recover(ctx context.Context, restored []checkpoint.Committable) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(w.cfg.Brokers...)}, w.cfg.ClientOpts...)...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	sts, err := commitRestored(ctx, cl, restored)
	if err != nil {
		return err
	}
	slotOf := make(map[string]int, len(w.ids))
	for i, id := range w.ids {
		slotOf[id] = i
	}
	for _, st := range sts {
		c := st.Committable
		w.log.Info("restored transaction committed",
			"transactional_id", c.TransactionalID, "producer_id", c.ProducerID, "epoch", c.Epoch,
			"coordinator_state", st.State, "coordinator_epoch", st.Epoch)
		if i, ok := slotOf[c.TransactionalID]; ok {
			w.pool.restored(i, c)
		}
	}
	return nil
}

// initChecked initialises slots, and then closes what their transactions
// left open by a marker their coordinator skipped (see hanging.go), from
// what the coordinator had of each before.
func (w *txnWriter[T]) initChecked(ctx context.Context, slots []int, newer func(context.Context) (bool, error)) error {
	if len(slots) == 0 {
		return nil
	}
	adm, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(w.cfg.Brokers...)}, w.cfg.ClientOpts...)...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer adm.Close()
	ids := make(map[int]string, len(slots))
	for _, i := range slots {
		ids[i] = w.ids[i]
	}
	before, err := describeBefore(ctx, kadm.NewClient(adm), ids)
	if err != nil {
		return err
	}
	// The initialisation aborts what the coordinator has Ongoing: not if
	// that continues an older transaction (see merged.go).
	var ongoing []openTxnAt
	for i, b := range before {
		if b.state == "Ongoing" && len(b.topics) > 0 {
			ongoing = append(ongoing, openTxnAt{txnID: w.ids[i], pid: b.pid, epoch: b.epoch, parts: b.topics, deadline: b.deadline})
		}
	}
	merged, err := findMerged(ctx, w.log, kadm.NewClient(adm), w.firstEpochs(), ongoing)
	if err := w.warnUnchecked(err); err != nil {
		return err
	}
	if len(merged) > 0 {
		return mergedError(merged)
	}
	var g errgroup.Group
	for _, i := range slots {
		g.Go(func() error { return w.initSlot(ctx, i) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	closed, err := closeHanging(ctx, w.log, kadm.NewClient(adm), w.firstEpochs(), newer, w.cfg.checkedTopics(), w.ids, w.pids, w.epochs, before)
	if err := w.warnUnchecked(err); err != nil {
		return err
	}
	for _, h := range closed {
		outcome := "aborted"
		if h.commit {
			outcome = "committed"
		}
		w.log.Warn("closed a transaction its coordinator had "+outcome+" without writing this partition's marker (as Kafka does for a partition without a leader at that moment); "+
			"the marker is written now, before the transactional id writes again",
			"partition", fmt.Sprintf("%s/%d", h.topic, h.partition), "start_offset", h.start, "transactional_id", h.txnID,
			"producer_id", h.pid, "epoch", h.epoch, "outcome", outcome)
	}
	return nil
}

// warnUnchecked logs an *uncheckedError (the check could not look) and
// returns nil for it; any other error it returns.
func (w *txnWriter[T]) warnUnchecked(err error) error {
	var unchecked *uncheckedError
	if errors.As(err, &unchecked) {
		w.log.Warn(unchecked.Error()+"; grant the worker's principal READ on the output topics (docs/operating.md, \"Transactions left open by a skipped marker\")",
			"topics", w.cfg.checkedTopics())
		return nil
	}
	return err
}

// initSlot makes slot i's client and initialises its producer id.
func (w *txnWriter[T]) initSlot(ctx context.Context, i int) error {
	if w.clients[i] != nil {
		w.clients[i].Close()
		w.clients[i] = nil
	}
	opts := append(append(w.cfg.clientOpts(),
		kgo.ClientID(w.clientID),
		kgo.ProducerLinger(linger),
		kgo.TransactionalID(w.ids[i]),
		kgo.TransactionTimeout(w.cfg.txnTimeout()),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.WithHooks(throttleHook{w.gate}),
	), w.cfg.ClientOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka client for %s: %w", w.ids[i], err)
	}
	pid, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		cl.Close()
		return fmt.Errorf("initialise transactional id %s: %w", w.ids[i], err)
	}
	w.pids[i], w.epochs[i] = pid, epoch
	w.log.Debug("transactional id initialised", "transactional_id", w.ids[i], "producer_id", pid, "epoch", epoch)
	w.clients[i] = cl
	w.loaded[i] = map[string]bool{}
	return nil
}

// lookupQuota tells the gate the producer quota of the writer's client
// id, if it bounds output in flight by time and the broker says (a
// principal without DESCRIBE_CONFIGS on the cluster is told no: its first
// throttle paces it instead).
func (w *txnWriter[T]) lookupQuota(ctx context.Context) {
	if w.cfg.FlushTarget <= 0 {
		return
	}
	i := slices.IndexFunc(w.clients, func(c *kgo.Client) bool { return c != nil })
	if i < 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	q, err := producerQuota(ctx, kadm.NewClient(w.clients[i]), w.clientID)
	switch {
	case err == nil:
		w.gate.knowQuota(q)
		w.log.Info("kafka sink paces its output under the producer quota of its client id",
			"client_id", w.clientID, "bytes_per_s", q)
	case !errors.Is(err, errNoQuota):
		w.log.Debug("kafka sink could not read its producer quota: a throttle will pace it", "client_id", w.clientID, "err", err)
	}
}

// recordSize is about the bytes r takes in a produce request, before its
// overhead: its key, value and headers.
func recordSize(r *kgo.Record) int {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// openNext picks the slot of the next transaction as soon as one is free,
// not at the next record: a writer keeps writing into the slot it picked
// until it pre-commits there. A zombie writer's picked slot is one the new
// owner initialised (it held no pre-committed transaction), so the zombie is
// fenced there and never reaches the restored slots the new owner has not
// yet re-initialised.
func (w *txnWriter[T]) openNext() {
	if w.cur >= 0 {
		return
	}
	i, err := w.pool.acquire()
	if err != nil {
		return // Write tries again and reports it
	}
	w.cur, w.written = i, 0
}

func (w *txnWriter[T]) Write(ctx context.Context, v T) error { return w.WriteAt(ctx, v, -1) }

// WriteAt implements engine.TimestampWriter.
func (w *txnWriter[T]) WriteAt(ctx context.Context, v T, ts int64) error {
	if err := w.failed.get(); err != nil {
		return err
	}
	r, err := w.cfg.record(v, ts)
	if err != nil {
		return err
	}
	return w.produce(ctx, r)
}

// Watermark implements engine.WatermarkWriter.
func (w *txnWriter[T]) Watermark(wm engine.Watermark) { w.marks.take(wm) }

// produce writes r into the open transaction, beginning one if needed.
func (w *txnWriter[T]) produce(ctx context.Context, r *kgo.Record) error {
	if w.cur < 0 {
		i, err := w.pool.acquire()
		if err != nil {
			return fmt.Errorf("kafka sink %s, task %d: %w", w.info.Operator, w.info.Task, err)
		}
		w.cur, w.written = i, 0
	}
	cl := w.clients[w.cur]
	if w.written == 0 {
		// franz-go begins the transaction on the broker with the first
		// record: a barrier interval without records ends nothing.
		if err := cl.BeginTransaction(); err != nil {
			return fmt.Errorf("begin transaction on %s: %w", w.ids[w.cur], err)
		}
		w.topics = w.topics[:0]
		w.landed[w.cur].take()
	}
	if n := len(w.topics); n == 0 || w.topics[n-1] != r.Topic {
		w.noteTopic(r.Topic)
	}
	if err := w.gate.wait(ctx, w.failed.get); err != nil {
		return err
	}
	w.written++
	w.gate.sent()
	w.gate.sized(recordSize(r))
	cl.Produce(ctx, r, w.promises[w.cur])
	return nil
}

// noteTopic adds topic to the topics the open transaction wrote, once.
func (w *txnWriter[T]) noteTopic(topic string) {
	if slices.Contains(w.topics, topic) {
		return
	}
	w.topics = append(w.topics, topic)
	if topic != w.cfg.Topic && !slices.Contains(w.cfg.Topics, topic) && !w.warned[topic] {
		if w.warned == nil {
			w.warned = map[string]bool{}
		}
		w.warned[topic] = true
		w.log.Warn("writing to a topic the sink's Topics do not name: a task's start does not ask its partitions for transactions a skipped marker left open, "+
			"which the next transaction of the same producer id there would then commit or abort with its own; name it in Topics (docs/operating.md, \"Transactions left open by a skipped marker\")",
			"topic", topic, "sink_topic", w.cfg.Topic)
	}
}

// awaitTopicsLoaded waits, after the flush, until the open transaction's
// client has stored the partitions of every topic the transaction wrote.
//
// franz-go, producing to a topic its client has not yet loaded, buffers the
// records, loads the topic's metadata, hands the records to their
// partitions, and only then stores the partitions where EndTransaction
// looks for the ones a transaction added. A transaction whose produce
// completes in between (seen on kfake under load; the window is a few
// instructions of the metadata goroutine) is ended by EndTransaction as an
// abort, because it finds no partition added, and EndTransaction returns
// nil: the checkpoint's output would be lost and nothing would say so. A
// topic is waited for once per client; a client keeps a loaded topic's
// partitions.
func (w *txnWriter[T]) awaitTopicsLoaded(ctx context.Context) error {
	cl, known := w.clients[w.cur], w.loaded[w.cur]
	for _, topic := range w.topics {
		if known[topic] {
			continue
		}
		wait := 50 * time.Microsecond
		deadline := time.Now().Add(topicLoadTimeout)
		for {
			if leader, _, _ := cl.PartitionLeader(topic, 0); leader >= 0 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("transaction %s wrote to %s, but its client has not stored the topic's partitions after %v: "+
					"ending the transaction now could abort it instead of committing it", w.ids[w.cur], topic, topicLoadTimeout)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(wait):
			}
			wait = min(2*wait, 10*time.Millisecond)
		}
		known[topic] = true
	}
	return nil
}

// topicLoadTimeout bounds awaitTopicsLoaded: a leader missing for longer
// fails the checkpoint, loudly.
const topicLoadTimeout = 30 * time.Second

// maxInFlight caps the gate's bound; the producer's own buffer
// (kgo.MaxBufferedRecords) blocks Produce before it anyway.
const maxInFlight = 1 << 20

func (w *txnWriter[T]) PreCommit(ctx context.Context, id checkpoint.ID) ([]checkpoint.Committable, error) {
	if err := w.marks.write(ctx, w.produce); err != nil {
		return nil, err
	}
	if w.cur >= 0 && w.written > 0 {
		cl := w.clients[w.cur]
		if err := cl.Flush(ctx); err != nil {
			return nil, fmt.Errorf("flush transaction %s: %w", w.ids[w.cur], err)
		}
		if err := w.gate.drain(ctx); err != nil {
			return nil, fmt.Errorf("flush transaction %s: %w", w.ids[w.cur], err)
		}
		if err := w.failed.get(); err != nil {
			return nil, err
		}
		if err := w.awaitTopicsLoaded(ctx); err != nil {
			return nil, err
		}
		// Read after the flush: the producer id and epoch the broker
		// holds the open transaction under (under transaction protocol
		// v2 the epoch changes with every transaction).
		pid, epoch, err := cl.ProducerID(ctx)
		if err != nil {
			return nil, fmt.Errorf("producer id of %s: %w", w.ids[w.cur], err)
		}
		w.pool.preCommit(w.cur, id, checkpoint.Committable{
			Operator:        w.info.Operator,
			TransactionalID: w.ids[w.cur],
			ProducerID:      pid,
			Epoch:           epoch,
			Record:          w.landed[w.cur].take(),
		})
		w.cur, w.written = -1, 0
		w.openNext()
	}
	return w.pool.pending(id), nil
}

func (w *txnWriter[T]) Commit(ctx context.Context, id checkpoint.ID) error {
	// A failed produce poisons only the open transaction: the pre-committed
	// ones are on other slots and commit regardless; the failure is
	// reported after them.
	for _, i := range w.pool.toCommit(id) {
		if err := w.clients[i].EndTransaction(ctx, kgo.TryCommit); err != nil {
			c := w.pool.slots[i].committable
			return fmt.Errorf("commit transaction %s (producer id %d, epoch %d) of checkpoint %d: %w",
				c.TransactionalID, c.ProducerID, c.Epoch, w.pool.slots[i].checkpoint, err)
		}
		w.pool.committed(i)
	}
	// The restored slots, initialised now that a checkpoint of this
	// owner's records their commit (see pool.complete), are checked as
	// the others were at open: the commit the restore found may have
	// missed a partition's marker.
	if re := w.pool.complete(id); len(re) > 0 {
		// This owner's checkpoint completed: no older owner's can follow.
		if err := w.initChecked(ctx, re, nil); err != nil {
			return err
		}
		for _, i := range re {
			w.pool.reinitialised(i)
		}
	}
	w.openNext()
	return w.failed.get()
}

// Close aborts the open transaction, whose records no checkpoint names, so
// that read_committed readers need not wait for its timeout. Pre-committed
// transactions are left to the next owner's recovery. It fails only with a
// *MergedTransactionError, when the open transaction continues an older one
// and is left open for that (see abortable).
func (w *txnWriter[T]) Close() error {
	var merged error
	if w.cur >= 0 && w.written > 0 && w.clients[w.cur] != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cl := w.clients[w.cur]
		if err := cl.AbortBufferedRecords(ctx); err == nil {
			var ok bool
			if ok, merged = w.abortable(ctx); ok {
				if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
					w.log.Debug("abort open transaction on close", "transactional_id", w.ids[w.cur], "err", err)
				}
			}
		}
		cancel()
	}
	w.closeClients()
	return merged
}

// abortable reports whether Close may abort the open transaction: whether
// no partition it wrote holds an older transaction of the producer id in
// the same open range (see merged.go); if one does, it returns the
// *MergedTransactionError saying so. Unsure, it leaves the transaction to
// the next owner, whose start checks it again, or to its timeout.
func (w *txnWriter[T]) abortable(ctx context.Context) (bool, error) {
	cl := w.clients[w.cur]
	pid, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		return false, nil
	}
	// Only the partitions the open transaction wrote, as its coordinator
	// has them: the previous transaction's marker may still be on its way
	// to another (a broker just restarted), its range open, and aborting
	// this one does not touch a partition it did not write.
	adm := kadm.NewClient(cl)
	before, err := describeBefore(ctx, adm, map[int]string{0: w.ids[w.cur]})
	if err != nil {
		w.log.Info("open transaction left to the next owner or its timeout: could not ask its coordinator what it wrote",
			"transactional_id", w.ids[w.cur], "err", err)
		return false, nil
	}
	b, ok := before[0]
	if !ok || b.state != "Ongoing" || b.pid != pid || b.epoch != epoch || len(b.topics) == 0 {
		return true, nil // nothing of it open: aborting ends nothing
	}
	merged, err := findMerged(ctx, w.log, adm, w.firstEpochs(),
		[]openTxnAt{{txnID: w.ids[w.cur], pid: pid, epoch: epoch, parts: b.topics, deadline: b.deadline}})
	switch {
	case err != nil:
		w.log.Info("open transaction left to the next owner or its timeout: could not check that aborting it takes no older transaction with it",
			"transactional_id", w.ids[w.cur], "err", err)
		return false, nil
	case len(merged) > 0:
		w.log.Error("open transaction not aborted: it continues an older transaction of the same producer id, whose marker its coordinator skipped, "+
			"and aborting it would abort that one's records too; its coordinator aborts both at the transaction's timeout (--txn-timeout)",
			"transactional_id", w.ids[w.cur], "merged", fmt.Sprint(merged), "txn_timeout", w.cfg.txnTimeout())
		return false, mergedError(merged)
	}
	return true, nil
}

// firstEpochs reads batches with the writer's brokers and client options.
func (w *txnWriter[T]) firstEpochs() firstEpochsFunc {
	return readFirstEpochs(append([]kgo.Opt{kgo.SeedBrokers(w.cfg.Brokers...)}, w.cfg.ClientOpts...))
}

func (w *txnWriter[T]) closeClients() {
	if w.leaveBudget != nil {
		w.leaveBudget()
	}
	for i, cl := range w.clients {
		if cl != nil {
			cl.Close()
			w.clients[i] = nil
		}
	}
}

// --- at-least-once and none ------------------------------------------------------

type plainWriter[T any] struct {
	cfg    Config[T]
	cl     *kgo.Client
	flush  bool
	log    *slog.Logger
	failed asyncErr
	once   sync.Once
	marks  marks
	// promised is w.promise, made once: a method value passed per record
	// would be allocated per record.
	promised func(*kgo.Record, error)
	// gate only counts the records written and their promises run, for
	// the flush to wait for all of them (inflightGate.drain); it paces
	// nothing.
	gate *inflightGate
}

func openPlain[T any](cfg Config[T], info engine.TaskInfo, log *slog.Logger) (*plainWriter[T], error) {
	opts := cfg.clientOpts()
	if cfg.delivery() == None && !cfg.Watermarks {
		// Watermark markers must stay behind the records they follow,
		// which retries without idempotence may reorder.
		opts = append(opts, kgo.DisableIdempotentWrite(), kgo.RequiredAcks(kgo.LeaderAck()))
	} else {
		opts = append(opts, kgo.RequiredAcks(kgo.AllISRAcks()))
	}
	cl, err := kgo.NewClient(append(opts, cfg.ClientOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka sink %s, task %d: kafka client: %w", info.Operator, info.Task, err)
	}
	w := &plainWriter[T]{cfg: cfg, cl: cl, flush: cfg.delivery() == AtLeastOnce, log: log, marks: newMarks(cfg, info),
		gate: newInflightGate(0, maxInFlight, time.Now)}
	w.promised = w.promise
	return w, nil
}

func (w *plainWriter[T]) Write(ctx context.Context, v T) error { return w.WriteAt(ctx, v, -1) }

// WriteAt implements engine.TimestampWriter.
func (w *plainWriter[T]) WriteAt(ctx context.Context, v T, ts int64) error {
	if err := w.failed.get(); err != nil {
		return err
	}
	r, err := w.cfg.record(v, ts)
	if err != nil {
		return err
	}
	w.gate.sent()
	w.cl.Produce(ctx, r, w.promised)
	return nil
}

// Watermark implements engine.WatermarkWriter.
func (w *plainWriter[T]) Watermark(wm engine.Watermark) { w.marks.take(wm) }

func (w *plainWriter[T]) promise(r *kgo.Record, err error) {
	defer recycle(r)
	defer w.gate.done() // after the failure is set: a drained flush sees it
	if err == nil {
		return
	}
	if w.flush {
		w.failed.set(fmt.Errorf("an earlier record (%d bytes) to %s/%d failed: %w", len(r.Key)+len(r.Value), r.Topic, r.Partition, err))
		return
	}
	// Fire and forget: say so once, do not fail the task.
	w.once.Do(func() {
		w.log.Warn("record not delivered (delivery none: not retried, further failures not logged)", "topic", r.Topic, "err", err)
	})
}

func (w *plainWriter[T]) PreCommit(ctx context.Context, _ checkpoint.ID) ([]checkpoint.Committable, error) {
	err := w.marks.write(ctx, func(ctx context.Context, r *kgo.Record) error {
		w.gate.sent()
		w.cl.Produce(ctx, r, w.promised)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !w.flush {
		return nil, nil
	}
	if err := w.cl.Flush(ctx); err != nil {
		return nil, fmt.Errorf("flush: %w", err)
	}
	if err := w.gate.drain(ctx); err != nil {
		return nil, fmt.Errorf("flush: %w", err)
	}
	return nil, w.failed.get()
}

func (w *plainWriter[T]) Commit(context.Context, checkpoint.ID) error { return w.failed.get() }

func (w *plainWriter[T]) Close() error {
	if !w.flush {
		// Without delivery guarantees nothing flushed at the barriers:
		// what is buffered now (a linger's worth) is the task's last
		// output, which closing the client would fail. Kafka's producer
		// flushes on close too; a broker that does not answer in time
		// loses it, as the delivery allows, with a warning per writer.
		ctx, cancel := context.WithTimeout(context.Background(), closeFlushTimeout)
		if err := w.cl.Flush(ctx); err != nil {
			w.log.Warn("output not delivered at close: the broker did not take it in time", "timeout", closeFlushTimeout, "err", err)
		}
		cancel()
	}
	w.cl.Close()
	return nil
}

// closeFlushTimeout bounds the flush of a writer without delivery
// guarantees at its close.
const closeFlushTimeout = 10 * time.Second
