package source

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/internal/marker"
)

// Headers a dead-lettered record carries besides its own.
const (
	HeaderError     = "weir.error"            // the decoder's error message
	HeaderTopic     = "weir.source.topic"     // the record's input topic
	HeaderPartition = "weir.source.partition" // its partition, decimal
	HeaderOffset    = "weir.source.offset"    // its offset, decimal
)

// DecodeError is the error a reader fails with when a record does not decode
// and OnDecodeError is Fail. Position names the record.
type DecodeError struct {
	Position engine.Position
	Err      error
}

func (e *DecodeError) Error() string { return fmt.Sprintf("decode record %s: %v", e.Position, e.Err) }
func (e *DecodeError) Unwrap() error { return e.Err }

// Kafka validates cfg and returns a factory of readers: the reader of task p
// reads partition p of every topic of cfg.Topics.
func Kafka[T any](cfg Config[T]) (engine.SourceFactory[T], error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("kafka source: %w", err)
	}
	cfg.Brokers = slices.Clone(cfg.Brokers)
	cfg.Topics = slices.Clone(cfg.Topics)
	cfg.ClientOpts = slices.Clone(cfg.ClientOpts)
	return func(ctx context.Context, info engine.TaskInfo, restored []checkpoint.SourcePosition) (engine.SourceReader[T], error) {
		r, err := open(ctx, &cfg, info, restored)
		if err != nil {
			return nil, fmt.Errorf("kafka source %s, task %d: %w", info.Operator, info.Task, err)
		}
		if cfg.Watermarks {
			return markedReader[T]{r}, nil
		}
		return r, nil
	}, nil
}

// reader reads partition part of each topic. It is used from one goroutine.
type reader[T any] struct {
	cfg    *Config[T]
	source string
	log    *slog.Logger
	// cl is the client of the reader's admin requests and dead letters:
	// its own (own), or its source's shared one.
	cl  *kgo.Client
	own bool
	// shared and slot, when the reader fetches with a shared client:
	// the client and the reader's queue in it. buf is reused by Poll.
	shared *consumer
	slot   *slot
	buf    []*kgo.Record
	joined bool // counted among its Consumers' readers
	part   int32
	// pos is, per topic, where the reader is in its partition. A
	// pointer, so that a record costs one lookup by topic name.
	pos map[string]*topicPos
	// last is the entry of pos that take found last, and lastTopic its
	// topic: the records of a fetch come a partition's batch at a time,
	// so most find their topic without a lookup. An entry of pos, once
	// made, is never replaced.
	last      *topicPos
	lastTopic string
	// layout is, per topic, its id and partition count when the reader
	// opened: what its positions record.
	layout map[string]checkpoint.TopicLayout
	policy OnDecodeError
	closed bool
	// marks is, per topic, the last marker of each task upstream
	// (Config.Watermarks).
	marks map[string]*upstream

	// wakeMu guards wakePoll, the running Poll's cancel (nil if none),
	// and woken, a Wake no Poll has taken yet (engine.Waker).
	wakeMu   sync.Mutex
	wakePoll context.CancelFunc
	woken    bool
}

func open[T any](ctx context.Context, cfg *Config[T], info engine.TaskInfo, restored []checkpoint.SourcePosition) (_ *reader[T], err error) {
	if info.Task < 0 || info.Task > math.MaxInt32 {
		return nil, fmt.Errorf("task index %d is not a partition number", info.Task)
	}
	log := info.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("source", info.Operator)
	r := &reader[T]{
		cfg:    cfg,
		source: info.Operator,
		log:    log,
		part:   int32(info.Task),
		pos:    make(map[string]*topicPos, len(cfg.Topics)),
		policy: cfg.onDecodeError(),
		marks:  map[string]*upstream{},
	}

	switch {
	case cfg.Consumers == nil:
		if r.cl, err = r.ownClient(cfg.ClientOpts...); err != nil {
			return nil, err
		}
	case !cfg.Consumers.join(info.Operator):
		r.joined = true
		if r.cl, err = r.ownClient(cfg.Consumers.clientOpts(info.Operator, info.Task)...); err != nil {
			cfg.Consumers.leave(info.Operator)
			r.joined = false
			return nil, err
		}
	default:
		r.joined = true
		if r.shared, err = cfg.Consumers.acquire(info.Operator, cfg.Brokers, log); err != nil {
			cfg.Consumers.leave(info.Operator)
			r.joined = false
			return nil, err
		}
		r.cl = r.shared.cl
	}
	defer func() {
		if err != nil {
			r.Close()
		}
	}()
	adm := kadm.NewClient(r.cl)

	if r.layout, err = topicLayouts(ctx, adm, cfg.Topics); err != nil {
		return nil, err
	}
	// The checkpoint first: a topic recreated with fewer partitions is
	// a changed layout before it is a task without a partition.
	if err := r.restore(restored); err != nil {
		return nil, err
	}
	n := int(r.layout[cfg.Topics[0]].Partitions)
	if int(r.part) >= n {
		return nil, fmt.Errorf("task %d has no partition to read: input topics %v have %d partitions (tasks 0..%d)",
			r.part, cfg.Topics, n, n-1)
	}
	if cfg.DeadLetterTopic != "" {
		tds, err := adm.ListTopics(ctx, cfg.DeadLetterTopic)
		if err != nil {
			return nil, fmt.Errorf("dead-letter topic %q: %w", cfg.DeadLetterTopic, err)
		}
		if td, ok := tds[cfg.DeadLetterTopic]; !ok || td.Err != nil {
			return nil, fmt.Errorf("dead-letter topic %q: does not exist (create it before the job starts): %v",
				cfg.DeadLetterTopic, td.Err)
		}
	}

	var fresh []string
	for _, t := range cfg.Topics {
		if r.pos[t] == nil {
			fresh = append(fresh, t)
		}
	}
	if len(fresh) > 0 {
		start, err := startOffsets(ctx, adm, cfg, fresh, r.part)
		if err != nil {
			return nil, err
		}
		for t, o := range start {
			r.pos[t] = &o
			log.Info("kafka source starts without checkpoint position",
				"topic", t, "partition", r.part, "start", string(cfg.start()), "offset", o.next, "leader_epoch", o.epoch)
		}
	}

	assign := make(map[string]map[int32]kgo.Offset, len(cfg.Topics))
	for t, p := range r.pos {
		at := kgo.NewOffset().At(p.next)
		if e, ok := p.leaderEpoch(); ok {
			// franz-go asks the leader where that epoch ends before it
			// fetches (OffsetForLeaderEpoch): a log truncated below p.next
			// since the checkpoint shows as data loss, not as other
			// records at the same offsets.
			at = at.WithEpoch(e)
		}
		assign[t] = map[int32]kgo.Offset{r.part: at}
	}
	if r.shared != nil {
		s := newSlot()
		switch err := r.shared.register(s, assign); {
		case err == nil:
			r.slot = s
			return r, nil
		case errors.Is(err, errBusy):
			// The task's previous run on this worker has not closed its
			// reader yet: read with a client of its own rather than wait.
			log.Info("kafka source reads with a client of its own: its partition is still another reader's", "reason", err)
			r.shared.release()
			r.shared = nil
			if r.cl, err = r.ownClient(cfg.Consumers.clientOpts(info.Operator, info.Task)...); err != nil {
				return nil, err
			}
		default:
			return nil, err
		}
	}
	r.cl.AddConsumePartitions(assign)
	return r, nil
}

// ownClient opens a client of the reader's own, with extra options.
func (r *reader[T]) ownClient(extra ...kgo.Opt) (*kgo.Client, error) {
	cl, err := kgo.NewClient(append(consumerOpts(r.cfg.Brokers, r.log), extra...)...)
	if err != nil {
		return nil, err
	}
	if err := checkConsumer(cl); err != nil {
		cl.Close()
		return nil, err
	}
	r.own = true
	return cl, nil
}

// checkConsumer refuses a client whose options, the caller's after
// consumerOpts, undo what reading exactly once rests on. franz-go takes
// the last of an option given twice, so ClientOpts could, without a word.
func checkConsumer(cl *kgo.Client) error {
	var bad []string
	// franz-go gives the level as the protocol's int8: 1 is READ_COMMITTED.
	if v, ok := cl.OptValue(kgo.FetchIsolationLevel).(int8); !ok || v != 1 {
		bad = append(bad, "kgo.FetchIsolationLevel other than ReadCommitted reads the records of aborted transactions")
	}
	if v, ok := cl.OptValue(kgo.ConsumeResetOffset).(kgo.Offset); !ok || v != kgo.NoResetOffset() {
		bad = append(bad, "kgo.ConsumeResetOffset other than NoResetOffset skips, or reads again, "+
			"the records of a position the log no longer holds")
	}
	if v, _ := cl.OptValue(kgo.KeepControlRecords).(bool); v {
		bad = append(bad, "kgo.KeepControlRecords reads transaction markers as records")
	}
	if len(bad) > 0 {
		return fmt.Errorf("source: the client options undo what reading exactly once rests on: %s", strings.Join(bad, "; "))
	}
	return nil
}

// consumerOpts are the options every reader's client starts with, its own
// or shared, before the caller's.
func consumerOpts(brokers []string, log *slog.Logger) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.WithLogger(kgoLogger{log}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// A position no longer in the log (retention, truncation) is data
		// the job never saw: fail the task instead of resetting silently.
		kgo.ConsumeResetOffset(kgo.NoResetOffset()),
	}
}

// restore takes the positions of a checkpoint. A position for another
// partition means the checkpoint is another task's: refused. A position for
// a topic the job no longer reads is dropped with a warning. A position
// whose topic is laid out otherwise now (another topic id: deleted and
// recreated; another partition count) is refused with a
// *checkpoint.LayoutError naming every such topic: its offset names a record
// of another log, or its keys belong to other tasks now.
func (r *reader[T]) restore(restored []checkpoint.SourcePosition) error {
	var changes []checkpoint.LayoutChange
	for _, p := range restored {
		switch {
		case p.Topic == "":
			return fmt.Errorf("restored position %+v names no topic", p)
		case !slices.Contains(r.cfg.Topics, p.Topic):
			if !r.cfg.DropUnreadPositions {
				return fmt.Errorf("%w: restored position %s/%d@%d is of a topic this source no longer reads (it reads %s): "+
					"the job's topics changed since its checkpoint (--topic, --input, or the job's code). "+
					"The job's state holds that topic's records, and the new one would start from --start without them: "+
					"point the job back at %s, or drop the position and read from --start with --allow-non-restored-state",
					engine.ErrIncompatibleCheckpoint, p.Topic, p.Partition, p.Offset, strings.Join(r.cfg.Topics, ", "), p.Topic)
			}
			r.log.Warn("kafka source drops restored position of a topic it no longer reads (allowed: non-restored state)",
				"topic", p.Topic, "partition", p.Partition, "offset", p.Offset)
			continue
		case p.Partition != r.part:
			return fmt.Errorf("restored position %s/%d@%d belongs to another task: task %d reads partition %d",
				p.Topic, p.Partition, p.Offset, r.part, r.part)
		case p.Offset < 0:
			return fmt.Errorf("restored position %s/%d@%d: negative offset", p.Topic, p.Partition, p.Offset)
		}
		if r.pos[p.Topic] != nil {
			return fmt.Errorf("restored positions name %s/%d twice", p.Topic, p.Partition)
		}
		live := r.layout[p.Topic]
		if p.TopicID == "" && p.Partitions == 0 {
			r.log.Warn("kafka source restores a position that does not record its topic's layout (a checkpoint of an earlier version): "+
				"a topic recreated or given other partitions since cannot be told",
				"topic", p.Topic, "partition", p.Partition, "offset", p.Offset)
		} else if c, changed := checkpoint.CompareTopic(checkpoint.TopicLayout{Name: p.Topic, ID: p.TopicID, Partitions: p.Partitions}, live); changed {
			changes = append(changes, c)
		}
		tp := &topicPos{next: p.Offset}
		if p.LeaderEpoch != nil && *p.LeaderEpoch >= 0 {
			tp.epoch, tp.hasEpoch = *p.LeaderEpoch, true
		}
		r.pos[p.Topic] = tp
		if r.cfg.Watermarks && len(p.Upstream) > 0 {
			r.marks[p.Topic] = restoreUpstream(p.Upstream)
		}
	}
	if len(changes) > 0 {
		return &checkpoint.LayoutError{
			Against: fmt.Sprintf("the checkpoint of task %d", r.part),
			Changes: changes,
			Advice: "The checkpoint's offsets and keyed state belong to the layout it was taken under, so the task does not " +
				"start on this one: start the job afresh under a new name (its state starts empty), or rescale its state " +
				"to the new layout (processor rescale, in a later release); docs/operating.md, \"The topics' layout changed\"",
		}
	}
	return nil
}

// Poll implements engine.SourceReader. It waits at most PollWait for
// records; what franz-go fetched beyond MaxPollRecords stays buffered in the
// client and comes with the next call.
func (r *reader[T]) Poll(ctx context.Context, b *engine.Batch[T]) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if r.slot != nil {
		recs, errs, err := r.slot.poll(ctx, r.shared, r.buf[:0], r.cfg.maxPollRecords(), r.cfg.pollWait())
		r.buf = recs
		if err != nil {
			return err
		}
		if err := r.fetchErrors(ctx, errs); err != nil {
			return err
		}
		for i, rec := range recs {
			recs[i] = nil
			if err := r.take(ctx, b, rec); err != nil {
				return err
			}
		}
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, r.cfg.pollWait())
	r.wakeMu.Lock()
	if r.woken {
		// Mail came while no Poll ran: the runtime has work now.
		r.woken = false
		r.wakeMu.Unlock()
		cancel()
		return nil
	}
	r.wakePoll = cancel
	r.wakeMu.Unlock()
	// A woken poll ends as one whose wait ran out: franz-go returns no
	// records with the context's error, which fetchErrors passes over.
	fs := r.cl.PollRecords(pctx, r.cfg.maxPollRecords())
	r.wakeMu.Lock()
	r.wakePoll = nil
	r.wakeMu.Unlock()
	cancel()
	if err := r.fetchErrors(ctx, fs.Errors()); err != nil {
		return err
	}
	for it := fs.RecordIter(); !it.Done(); {
		if err := r.take(ctx, b, it.Next()); err != nil {
			return err
		}
	}
	return nil
}

var _ engine.Waker = (*reader[struct{}])(nil)

// Wake implements engine.Waker: it ends the running Poll's wait, or the
// next Poll's if none runs.
func (r *reader[T]) Wake() {
	if r.slot != nil {
		r.slot.wake()
		return
	}
	r.wakeMu.Lock()
	defer r.wakeMu.Unlock()
	if r.wakePoll != nil {
		r.wakePoll()
		return
	}
	r.woken = true
}

// fetchErrors returns the errors of a poll, except the one franz-go injects
// when the bounded wait expired (or a Wake ended it). Every other error
// fails the task: the runtime restarts it from its checkpoint, so records
// fetched with the error are not lost.
func (r *reader[T]) fetchErrors(ctx context.Context, fes []kgo.FetchError) error {
	var errs []error
	for _, e := range fes {
		switch {
		case e.Topic == "" && (errors.Is(e.Err, context.DeadlineExceeded) || errors.Is(e.Err, context.Canceled)):
			if err := ctx.Err(); err != nil {
				return err
			}
		case errors.Is(e.Err, kgo.ErrClientClosed):
			return fmt.Errorf("poll: %w", e.Err)
		case errors.Is(e.Err, kerr.OffsetOutOfRange), errors.As(e.Err, new(*kgo.ErrDataLoss)):
			errs = append(errs, r.logLost(ctx, e))
		default:
			errs = append(errs, fmt.Errorf("fetch %s/%d: %w", e.Topic, e.Partition, e.Err))
		}
	}
	return errors.Join(errs...)
}

// ErrLogLost is wrapped by the error a reader fails with when the log no
// longer holds the records from its position on: Kafka answered that the
// offset is out of range (records deleted by retention or DeleteRecords
// before the job read them, a topic recreated under the same name) or that
// the log was truncated below it (an unclean leader election, KIP-320). The
// reader never skips to where the log goes on: what was lost is input the
// job never saw.
var ErrLogLost = errors.New("the log no longer holds the position to resume from")

// logLost is the error of a fetch that found the log without the reader's
// position: what happened, as far as the log's bounds now tell, and what
// to do.
func (r *reader[T]) logLost(ctx context.Context, e kgo.FetchError) error {
	var at int64
	if p := r.pos[e.Topic]; p != nil {
		at = p.next
	}
	var what string
	var loss *kgo.ErrDataLoss
	if errors.As(e.Err, &loss) {
		what = fmt.Sprintf("the log was truncated below offset %d since the checkpoint (leader epoch %d ends at offset %d): "+
			"an unclean leader election, or the topic restored or recreated", loss.ConsumedTo, loss.ConsumedToEpoch, loss.ResetTo)
	} else {
		what = "the broker has no such offset (OFFSET_OUT_OF_RANGE)"
		start, end, err := r.bounds(ctx, e.Topic)
		switch {
		case err != nil:
			what += ": records were deleted before the job read them, the log was truncated, or the topic was recreated"
		case at < start:
			what += fmt.Sprintf(": the log starts at offset %d now, records were deleted before the job read them "+
				"(retention.ms or retention.bytes, kafka-delete-records); on a transactional input (an exactly-once job's output), "+
				"what was deleted may be only the markers that ended transactions the job had read, if the topic had no new record "+
				"for longer than its retention.ms (kafka-get-offsets.sh and the producers' records tell)", start)
		default:
			what += fmt.Sprintf(": the log ends at offset %d now, it was truncated (an unclean leader election) "+
				"or the topic was deleted and recreated", end)
		}
	}
	return fmt.Errorf("%w: %s/%d at offset %d: %s. The records from there to what the log holds now are lost to the job, "+
		"which does not skip them silently. To accept the loss, start the job afresh under a new name (its state starts empty) "+
		"with --start; to avoid it, keep a topic's retention longer than the job can lag: %v",
		ErrLogLost, e.Topic, e.Partition, at, what, e.Err)
}

// bounds returns where the reader's partition of topic starts and ends now.
func (r *reader[T]) bounds(ctx context.Context, topic string) (start, end int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	adm := kadm.NewClient(r.cl)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return 0, 0, err
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, 0, err
	}
	s, ok1 := starts.Lookup(topic, r.part)
	e, ok2 := ends.Lookup(topic, r.part)
	if !ok1 || !ok2 || s.Err != nil || e.Err != nil {
		return 0, 0, fmt.Errorf("no offsets of %s/%d", topic, r.part)
	}
	return s.Offset, e.Offset, nil
}

// take decodes rec into b, or dead-letters it, and only then counts its
// offset as consumed.
func (r *reader[T]) take(ctx context.Context, b *engine.Batch[T], rec *kgo.Record) error {
	tp := r.last
	if tp == nil || rec.Topic != r.lastTopic {
		tp = r.pos[rec.Topic]
		if tp != nil {
			r.last, r.lastTopic = tp, rec.Topic
		}
	}
	if tp == nil || rec.Partition != r.part {
		return fmt.Errorf("fetched record %s/%d@%d that task %d does not read", rec.Topic, rec.Partition, rec.Offset, r.part)
	}
	if rec.Offset < tp.next {
		// A record again, or one of before the position the reader
		// resumed from: never taken twice.
		return fmt.Errorf("fetched record %s/%d@%d is before the reader's position %d", rec.Topic, rec.Partition, rec.Offset, tp.next)
	}
	pos := engine.Position{Source: r.source, Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Timestamp: rec.Timestamp.UnixMilli()}
	if r.cfg.Watermarks && marker.Is(rec) {
		if err := r.mark(rec); err != nil {
			return fmt.Errorf("record %s: %w", pos, err)
		}
		tp.consumed(rec)
		return nil
	}
	v, decodeErr := r.decode(rec)
	switch {
	case decodeErr == nil:
		b.Add(v, pos)
	case r.policy == Fail:
		return &DecodeError{Position: pos, Err: decodeErr}
	default:
		if err := r.deadLetter(ctx, rec, decodeErr); err != nil {
			return fmt.Errorf("dead-letter record %s to %s (decode error: %v): %w",
				pos, r.cfg.DeadLetterTopic, decodeErr, err)
		}
		if r.cfg.DeadLettered != nil {
			r.cfg.DeadLettered()
		}
		r.log.Warn("kafka source dead-lettered a record that does not decode",
			"topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset,
			"dead_letter_topic", r.cfg.DeadLetterTopic, "error", decodeErr)
	}
	tp.consumed(rec)
	return nil
}

// topicPos is where a reader is in one topic's partition.
type topicPos struct {
	// next is the offset after the last record Poll returned (or
	// dead-lettered); before the first, the restored or start offset.
	next int64
	// epoch is the leader epoch of the record before next, if hasEpoch
	// (known from the last record taken, or the checkpoint).
	epoch    int32
	hasEpoch bool
}

// leaderEpoch returns p's epoch, if known.
func (p *topicPos) leaderEpoch() (int32, bool) { return p.epoch, p.hasEpoch }

// consumed counts rec, of p's topic, as consumed: the next position is
// after it, in its leader epoch.
func (p *topicPos) consumed(rec *kgo.Record) {
	p.next = rec.Offset + 1
	if rec.LeaderEpoch >= 0 {
		p.epoch, p.hasEpoch = rec.LeaderEpoch, true
	}
}

func (r *reader[T]) decode(rec *kgo.Record) (v T, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("decoder panicked: %v", p)
		}
	}()
	return r.cfg.Decode(rec)
}

// deadLetter produces rec's key, value, headers and timestamp to the
// dead-letter topic and waits for the broker's ack: only then may the record
// count as consumed. A crash after the ack and before the next checkpoint
// dead-letters it again after restore (at-least-once).
func (r *reader[T]) deadLetter(ctx context.Context, rec *kgo.Record, decodeErr error) error {
	headers := append(slices.Clip(rec.Headers),
		kgo.RecordHeader{Key: HeaderError, Value: []byte(decodeErr.Error())},
		kgo.RecordHeader{Key: HeaderTopic, Value: []byte(rec.Topic)},
		kgo.RecordHeader{Key: HeaderPartition, Value: strconv.AppendInt(nil, int64(rec.Partition), 10)},
		kgo.RecordHeader{Key: HeaderOffset, Value: strconv.AppendInt(nil, rec.Offset, 10)},
	)
	dl := &kgo.Record{
		Topic:     r.cfg.DeadLetterTopic,
		Key:       rec.Key,
		Value:     rec.Value,
		Headers:   headers,
		Timestamp: rec.Timestamp,
	}
	return r.cl.ProduceSync(ctx, dl).FirstErr()
}

// Positions implements engine.SourceReader: per input topic, the offset
// after the last record Poll returned from partition p.
func (r *reader[T]) Positions() []checkpoint.SourcePosition {
	out := make([]checkpoint.SourcePosition, 0, len(r.cfg.Topics))
	for _, t := range r.cfg.Topics {
		l := r.layout[t]
		p := checkpoint.SourcePosition{Source: r.source, Topic: t, Partition: r.part, TopicID: l.ID, Partitions: l.Partitions}
		if tp := r.pos[t]; tp != nil {
			p.Offset = tp.next
			if e, ok := tp.leaderEpoch(); ok {
				p.LeaderEpoch = &e
			}
		}
		if u := r.marks[t]; u != nil {
			p.Upstream = u.positions()
		}
		out = append(out, p)
	}
	return out
}

// Close implements engine.SourceReader. It closes the client; records it
// buffered are dropped, which is safe: a reopened task restores from its
// checkpoint.
func (r *reader[T]) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	if r.slot != nil {
		r.shared.unregister(r.slot)
	}
	if r.shared != nil {
		r.shared.release()
	}
	if r.own && r.cl != nil {
		r.cl.Close()
	}
	if r.joined {
		r.cfg.Consumers.leave(r.source)
	}
	return nil
}
