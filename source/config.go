package source

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Decoder turns a Kafka record into a value of the job. An error (or a panic,
// which the reader recovers) sends the record to the dead-letter topic or
// fails the task, as Config.OnDecodeError says.
type Decoder[T any] func(*kgo.Record) (T, error)

// ValueDecoder decodes the record's value with a codec, for instance a
// state.Codec: anything with Decode([]byte) (T, error). The codec may not keep
// the bytes it is given beyond the call.
func ValueDecoder[T any](c interface{ Decode([]byte) (T, error) }) Decoder[T] {
	return func(r *kgo.Record) (T, error) { return c.Decode(r.Value) }
}

// Start says where a partition is read from when no checkpoint gives a
// position.
type Start string

const (
	// StartEarliest reads from the log start offset. It is the default.
	StartEarliest Start = "earliest"
	// StartLatest reads from the last stable offset: only what is committed
	// after the reader opens (and what commits later of transactions that
	// were open at that time).
	StartLatest Start = "latest"
	// StartTimestamp reads from the first record whose timestamp is at or
	// after Config.StartTime (the end of the log if there is none).
	StartTimestamp Start = "timestamp"
)

// ParseStart parses a start setting: "earliest", "latest" or "timestamp".
func ParseStart(s string) (Start, error) {
	switch v := Start(strings.ToLower(strings.TrimSpace(s))); v {
	case StartEarliest, StartLatest, StartTimestamp:
		return v, nil
	}
	return "", fmt.Errorf("start %q: want earliest, latest or timestamp", s)
}

// OnDecodeError says what a reader does with a record its decoder rejects.
type OnDecodeError string

const (
	// DeadLetter produces the raw record to Config.DeadLetterTopic, with the
	// error and the record's coordinates in headers, and goes on.
	DeadLetter OnDecodeError = "dead-letter"
	// Fail fails the task with a *DecodeError naming the record.
	Fail OnDecodeError = "fail"
)

// ParseOnDecodeError parses "dead-letter" or "fail".
func ParseOnDecodeError(s string) (OnDecodeError, error) {
	switch v := OnDecodeError(strings.ToLower(strings.TrimSpace(s))); v {
	case DeadLetter, Fail:
		return v, nil
	}
	return "", fmt.Errorf("on-decode-error %q: want dead-letter or fail", s)
}

// Defaults of Config.
const (
	DefaultPollWait       = 50 * time.Millisecond
	DefaultMaxPollRecords = 500
	// MaxPollWait bounds PollWait: the runtime injects barriers and fires
	// timers between polls, so an idle poll must come back quickly.
	MaxPollWait = time.Second
)

// Config configures a Kafka source. The zero value of every optional field
// means its documented default. Field names are the setting names that
// Validate's errors use.
type Config[T any] struct {
	// Brokers are the bootstrap addresses (host:port). Required.
	Brokers []string
	// Topics are the input topics; all must have the same partition count.
	// Required, no duplicates.
	Topics []string
	// DropUnreadPositions drops restored positions of topics not in Topics
	// (the job reads other topics since its checkpoint) with a warning;
	// without it such a position fails the restore, wrapping
	// engine.ErrIncompatibleCheckpoint, as Flink refuses state it cannot
	// map without --allowNonRestoredState.
	DropUnreadPositions bool
	// Decode turns a record into a value. Required.
	Decode Decoder[T]

	// Start is where a partition is read from when the checkpoint has no
	// position for it. Default StartEarliest.
	Start Start
	// StartTime is the timestamp for StartTimestamp; required with it and
	// refused with any other Start.
	StartTime time.Time

	// OnDecodeError is what happens to a record that fails to decode.
	// Default: DeadLetter when DeadLetterTopic is set, Fail otherwise.
	OnDecodeError OnDecodeError
	// DeadLetterTopic receives records that fail to decode. It must exist
	// when the reader opens.
	DeadLetterTopic string
	// DeadLettered, if set, is called after each record the broker
	// acknowledged on DeadLetterTopic (a metric's counter).
	DeadLettered func()

	// GroupID is the consumer group whose committed offsets a Committer
	// writes for lag monitoring. The reader itself never joins or reads a
	// group: positions come from checkpoints.
	GroupID string

	// PollWait bounds how long Poll waits when no record is ready.
	// Default DefaultPollWait, at most MaxPollWait.
	PollWait time.Duration
	// MaxPollRecords caps the records one Poll returns; the rest stay
	// buffered in the client for the next Poll. Default
	// DefaultMaxPollRecords.
	MaxPollRecords int

	// Watermarks reads the watermark markers a sink with the same setting
	// writes (weir's repartition topics): they are not records, and each
	// split's watermark is the least of the last marker of each task that
	// writes into it (see runtime.WatermarkReader). The reader's source
	// takes no watermark strategy.
	Watermarks bool

	// Consumers, if set, is the worker's shared consumers: the reader
	// fetches with the client of its source, shared with the other tasks'
	// readers, instead of one of its own; ClientOpts are then not used
	// (NewConsumers takes the shared clients' options).
	Consumers *Consumers

	// ClientOpts are extra franz-go options (TLS, SASL, fetch sizes, ...),
	// applied after the reader's own, so they can override them; overriding
	// the isolation level or the reset offset breaks the guarantees above.
	ClientOpts []kgo.Opt
}

// Validate reports every bad setting, joined, each naming its field.
func (c *Config[T]) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(c.Brokers) == 0 {
		bad("Brokers: empty, need at least one bootstrap address")
	}
	for i, b := range c.Brokers {
		if strings.TrimSpace(b) == "" {
			bad("Brokers[%d]: empty address", i)
		}
	}
	if len(c.Topics) == 0 {
		bad("Topics: empty, need at least one input topic")
	}
	seen := make(map[string]bool, len(c.Topics))
	for i, t := range c.Topics {
		switch {
		case t == "":
			bad("Topics[%d]: empty topic name", i)
		case seen[t]:
			bad("Topics[%d]: %q listed twice", i, t)
		}
		seen[t] = true
	}
	if c.Decode == nil {
		bad("Decode: nil decoder")
	}
	switch c.Start {
	case "", StartEarliest, StartLatest:
		if !c.StartTime.IsZero() {
			bad("StartTime: set, but Start is %q (StartTime needs Start %q)", c.start(), StartTimestamp)
		}
	case StartTimestamp:
		if c.StartTime.IsZero() {
			bad("StartTime: required with Start %q", StartTimestamp)
		}
	default:
		bad("Start: %q, want %q, %q or %q", c.Start, StartEarliest, StartLatest, StartTimestamp)
	}
	switch c.OnDecodeError {
	case "":
	case DeadLetter:
		if c.DeadLetterTopic == "" {
			bad("DeadLetterTopic: required with OnDecodeError %q", DeadLetter)
		}
	case Fail:
		if c.DeadLetterTopic != "" {
			bad("DeadLetterTopic: %q set, but OnDecodeError is %q and would never use it", c.DeadLetterTopic, Fail)
		}
	default:
		bad("OnDecodeError: %q, want %q or %q", c.OnDecodeError, DeadLetter, Fail)
	}
	if c.DeadLetterTopic != "" && seen[c.DeadLetterTopic] {
		bad("DeadLetterTopic: %q is also an input topic", c.DeadLetterTopic)
	}
	if c.PollWait < 0 || c.PollWait > MaxPollWait {
		bad("PollWait: %v, want between 0 (default %v) and %v", c.PollWait, DefaultPollWait, MaxPollWait)
	}
	if c.MaxPollRecords < 0 {
		bad("MaxPollRecords: %d, want > 0 (or 0 for %d)", c.MaxPollRecords, DefaultMaxPollRecords)
	}
	return errors.Join(errs...)
}

func (c *Config[T]) start() Start {
	if c.Start == "" {
		return StartEarliest
	}
	return c.Start
}

func (c *Config[T]) onDecodeError() OnDecodeError {
	switch {
	case c.OnDecodeError != "":
		return c.OnDecodeError
	case c.DeadLetterTopic != "":
		return DeadLetter
	}
	return Fail
}

func (c *Config[T]) pollWait() time.Duration {
	if c.PollWait == 0 {
		return DefaultPollWait
	}
	return c.PollWait
}

func (c *Config[T]) maxPollRecords() int {
	if c.MaxPollRecords == 0 {
		return DefaultMaxPollRecords
	}
	return c.MaxPollRecords
}
