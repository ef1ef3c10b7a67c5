package source

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/marker"
	"github.com/weirstream/weir/runtime"
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
	Position runtime.Position
	Err      error
}

func (e *DecodeError) Error() string { return fmt.Sprintf("decode record %s: %v", e.Position, e.Err) }
func (e *DecodeError) Unwrap() error { return e.Err }

// Kafka validates cfg and returns a factory of readers: the reader of task p
// reads partition p of every topic of cfg.Topics.
func Kafka[T any](cfg Config[T]) (runtime.SourceFactory[T], error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("kafka source: %w", err)
	}
	cfg.Brokers = slices.Clone(cfg.Brokers)
	cfg.Topics = slices.Clone(cfg.Topics)
	cfg.ClientOpts = slices.Clone(cfg.ClientOpts)
	return func(ctx context.Context, info runtime.TaskInfo, restored []checkpoint.SourcePosition) (runtime.SourceReader[T], error) {
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
	cl     *kgo.Client
	part   int32
	// next is, per topic, the offset after the last record Poll returned
	// (or dead-lettered); before the first, the restored or start offset.
	next   map[string]int64
	policy OnDecodeError
	closed bool
	// marks is, per topic, the last marker of each task upstream
	// (Config.Watermarks).
	marks map[string]*upstream
}

func open[T any](ctx context.Context, cfg *Config[T], info runtime.TaskInfo, restored []checkpoint.SourcePosition) (_ *reader[T], err error) {
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
		next:   make(map[string]int64, len(cfg.Topics)),
		policy: cfg.onDecodeError(),
		marks:  map[string]*upstream{},
	}

	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.WithLogger(kgoLogger{log}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// A position no longer in the log (retention, truncation) is data
		// the job never saw: fail the task instead of resetting silently.
		kgo.ConsumeResetOffset(kgo.NoResetOffset()),
	}
	r.cl, err = kgo.NewClient(append(opts, cfg.ClientOpts...)...)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			r.cl.Close()
		}
	}()
	adm := kadm.NewClient(r.cl)

	n, err := partitionCount(ctx, adm, cfg.Topics)
	if err != nil {
		return nil, err
	}
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

	if err := r.restore(restored); err != nil {
		return nil, err
	}
	var fresh []string
	for _, t := range cfg.Topics {
		if _, ok := r.next[t]; !ok {
			fresh = append(fresh, t)
		}
	}
	if len(fresh) > 0 {
		start, err := startOffsets(ctx, adm, cfg, fresh, r.part)
		if err != nil {
			return nil, err
		}
		for t, o := range start {
			r.next[t] = o
			log.Info("kafka source starts without checkpoint position",
				"topic", t, "partition", r.part, "start", string(cfg.start()), "offset", o)
		}
	}

	assign := make(map[string]map[int32]kgo.Offset, len(cfg.Topics))
	for t, o := range r.next {
		assign[t] = map[int32]kgo.Offset{r.part: kgo.NewOffset().At(o)}
	}
	r.cl.AddConsumePartitions(assign)
	return r, nil
}

// restore takes the positions of a checkpoint. A position for another
// partition means the checkpoint is another task's: refused. A position for
// a topic the job no longer reads is dropped with a warning.
func (r *reader[T]) restore(restored []checkpoint.SourcePosition) error {
	for _, p := range restored {
		switch {
		case p.Topic == "":
			return fmt.Errorf("restored position %+v names no topic", p)
		case !slices.Contains(r.cfg.Topics, p.Topic):
			r.log.Warn("kafka source drops restored position of a topic it no longer reads",
				"topic", p.Topic, "partition", p.Partition, "offset", p.Offset)
			continue
		case p.Partition != r.part:
			return fmt.Errorf("restored position %s/%d@%d belongs to another task: task %d reads partition %d",
				p.Topic, p.Partition, p.Offset, r.part, r.part)
		case p.Offset < 0:
			return fmt.Errorf("restored position %s/%d@%d: negative offset", p.Topic, p.Partition, p.Offset)
		}
		if _, dup := r.next[p.Topic]; dup {
			return fmt.Errorf("restored positions name %s/%d twice", p.Topic, p.Partition)
		}
		r.next[p.Topic] = p.Offset
		if r.cfg.Watermarks && len(p.Upstream) > 0 {
			r.marks[p.Topic] = restoreUpstream(p.Upstream)
		}
	}
	return nil
}

// Poll implements runtime.SourceReader. It waits at most PollWait for
// records; what franz-go fetched beyond MaxPollRecords stays buffered in the
// client and comes with the next call.
func (r *reader[T]) Poll(ctx context.Context, b *runtime.Batch[T]) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, r.cfg.pollWait())
	fs := r.cl.PollRecords(pctx, r.cfg.maxPollRecords())
	cancel()
	if err := r.fetchErrors(ctx, fs); err != nil {
		return err
	}
	for it := fs.RecordIter(); !it.Done(); {
		if err := r.take(ctx, b, it.Next()); err != nil {
			return err
		}
	}
	return nil
}

// fetchErrors returns the errors of fs, except the one franz-go injects when
// the bounded wait expired. Every other error fails the task: the runtime
// restarts it from its checkpoint, so records fetched with the error are not
// lost.
func (r *reader[T]) fetchErrors(ctx context.Context, fs kgo.Fetches) error {
	var errs []error
	for _, e := range fs.Errors() {
		switch {
		case e.Topic == "" && (errors.Is(e.Err, context.DeadlineExceeded) || errors.Is(e.Err, context.Canceled)):
			if err := ctx.Err(); err != nil {
				return err
			}
		case errors.Is(e.Err, kgo.ErrClientClosed):
			return fmt.Errorf("poll: %w", e.Err)
		default:
			errs = append(errs, fmt.Errorf("fetch %s/%d: %w", e.Topic, e.Partition, e.Err))
		}
	}
	return errors.Join(errs...)
}

// take decodes rec into b, or dead-letters it, and only then counts its
// offset as consumed.
func (r *reader[T]) take(ctx context.Context, b *runtime.Batch[T], rec *kgo.Record) error {
	if _, ok := r.next[rec.Topic]; !ok || rec.Partition != r.part {
		return fmt.Errorf("fetched record %s/%d@%d that task %d does not read", rec.Topic, rec.Partition, rec.Offset, r.part)
	}
	pos := runtime.Position{Source: r.source, Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Timestamp: rec.Timestamp.UnixMilli()}
	if r.cfg.Watermarks && marker.Is(rec) {
		if err := r.mark(rec); err != nil {
			return fmt.Errorf("record %s: %w", pos, err)
		}
		r.next[rec.Topic] = rec.Offset + 1
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
		r.log.Warn("kafka source dead-lettered a record that does not decode",
			"topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset,
			"dead_letter_topic", r.cfg.DeadLetterTopic, "error", decodeErr)
	}
	r.next[rec.Topic] = rec.Offset + 1
	return nil
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

// Positions implements runtime.SourceReader: per input topic, the offset
// after the last record Poll returned from partition p.
func (r *reader[T]) Positions() []checkpoint.SourcePosition {
	out := make([]checkpoint.SourcePosition, 0, len(r.cfg.Topics))
	for _, t := range r.cfg.Topics {
		p := checkpoint.SourcePosition{Source: r.source, Topic: t, Partition: r.part, Offset: r.next[t]}
		if u := r.marks[t]; u != nil {
			p.Upstream = u.positions()
		}
		out = append(out, p)
	}
	return out
}

// Close implements runtime.SourceReader. It closes the client; records it
// buffered are dropped, which is safe: a reopened task restores from its
// checkpoint.
func (r *reader[T]) Close() error {
	if !r.closed {
		r.closed = true
		r.cl.Close()
	}
	return nil
}
