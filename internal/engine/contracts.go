package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/weirstream/weir/checkpoint"
)

// Position says where a record came from: the source operator, the split
// (for Kafka, the topic partition) and its offset in that split. Errors that a
// record causes name its position.
type Position struct {
	Source    string
	Topic     string
	Partition int32
	Offset    int64
	// Timestamp is the record's event time in Unix milliseconds: its Kafka
	// timestamp, or what the source's WatermarkStrategy extracts. Records
	// an operator emits carry the timestamp of the record (or event-time
	// timer) at hand.
	Timestamp int64
}

func (p Position) String() string {
	if p.Emitted() {
		return "emitted by operator " + p.Source
	}
	if p.Topic != "" {
		return fmt.Sprintf("%s %s/%d@%d", p.Source, p.Topic, p.Partition, p.Offset)
	}
	return fmt.Sprintf("%s %d@%d", p.Source, p.Partition, p.Offset)
}

// emittedPosition is the Position of what operator op emits on its own,
// from a timer or a window that fires: it names no record of the input
// (Partition and Offset -1), so that nothing downstream takes it for the
// record the task processed before (a dead letter's headers would name
// that one, which was good, for reading again).
func emittedPosition(op string, ts int64) Position {
	return Position{Source: op, Partition: -1, Offset: -1, Timestamp: ts}
}

// Emitted says whether p is an operator's own (see emittedPosition) rather
// than a record's of the input.
func (p Position) Emitted() bool { return p.Topic == "" && p.Partition == -1 && p.Offset == -1 }

// Batch is what a source reader fills on each poll: values and, at the same
// index, where each came from.
type Batch[T any] struct {
	Values    []T
	Positions []Position
}

// Add appends one record.
func (b *Batch[T]) Add(v T, p Position) {
	b.Values = append(b.Values, v)
	b.Positions = append(b.Positions, p)
}

// Len is the number of records in the batch.
func (b *Batch[T]) Len() int { return len(b.Values) }

func (b *Batch[T]) reset() {
	clear(b.Values) // drop references so the GC can free what was emitted
	b.Values = b.Values[:0]
	b.Positions = b.Positions[:0]
}

// ErrEndOfInput is returned by SourceReader.Poll when a bounded source has
// emitted its last record.
var ErrEndOfInput = errors.New("end of input")

// TaskInfo tells factories which task they build for.
type TaskInfo struct {
	Job      string
	Task     int
	Operator string
	Logger   *slog.Logger
	// NewerCheckpoint reports whether a checkpoint completed after the
	// task listed them to restore: an older owner, still running, wrote
	// it, and may have committed its transactions since. nil: not known
	// (tests).
	NewerCheckpoint func(context.Context) (bool, error)
}

// SourceReader reads the splits of one source for one task. It is used from
// one goroutine.
type SourceReader[T any] interface {
	// Poll appends the next records to b. When no record is ready it waits
	// briefly (tens of milliseconds at most) and returns with none, so that
	// the runtime can inject barriers and fire timers. It returns
	// ErrEndOfInput once a bounded source is exhausted.
	Poll(ctx context.Context, b *Batch[T]) error
	// Positions returns, per split, the offset of the next record Poll would
	// return: the source's share of a checkpoint.
	Positions() []checkpoint.SourcePosition
	Close() error
}

// Waker is a SourceReader whose Poll can be ended early. The runtime calls
// Wake, from another goroutine, when mail for the task's root arrives (a
// barrier to inject, a completed checkpoint to commit), so that neither
// waits out a Poll blocked for records: at 100 ms checkpoints that wait
// was a tenth of the time from a record's write to its visibility. Poll,
// woken, returns what it has (nothing, if it was still waiting) and no
// error; a Wake while no Poll runs ends the next one at once.
type Waker interface {
	Wake()
}

// SourceFactory opens a source reader for a task. restored holds the
// positions of the checkpoint the task restores from, nil on a fresh start.
type SourceFactory[T any] func(ctx context.Context, info TaskInfo, restored []checkpoint.SourcePosition) (SourceReader[T], error)

// SinkWriter writes a task's output. It is used from one goroutine: the one
// that runs the sink's operator chain.
type SinkWriter[T any] interface {
	Write(ctx context.Context, v T) error
	// PreCommit runs at barrier id: flush what was written since the previous
	// barrier and pre-commit it. It returns the committables of every
	// pre-commit not yet committed (those of aborted checkpoints too): they
	// all go into checkpoint id's manifest.
	PreCommit(ctx context.Context, id checkpoint.ID) ([]checkpoint.Committable, error)
	// Commit runs once checkpoint id is complete: commit every pre-commit up
	// to and including id.
	Commit(ctx context.Context, id checkpoint.ID) error
	Close() error
}

// TimestampWriter is a SinkWriter that takes each record's event time
// (Position.Timestamp, Unix ms): the Kafka sink writes it as the record's
// timestamp, as Flink's KafkaSink and Kafka Streams do. The runtime calls
// WriteAt instead of Write.
type TimestampWriter[T any] interface {
	WriteAt(ctx context.Context, v T, timestamp int64) error
}

// SinkOpener is what the engine opens each task's SinkWriter with. A sink whose
// writers pre-commit (two-phase commit: PreCommit returns committables)
// also implements Committer, so that a restore can tell what became of
// them.
type SinkOpener[T any] interface {
	// Open opens the writer of a task. restored holds the committables of
	// the checkpoint the task restores from that are not known committed
	// yet: Open commits them before it returns (recovery order, see
	// DESIGN.md), and fences every earlier writer of the task.
	Open(ctx context.Context, info TaskInfo, restored []checkpoint.Committable) (SinkWriter[T], error)
}

// SinkFactory is a SinkOpener as a function.
type SinkFactory[T any] func(ctx context.Context, info TaskInfo, restored []checkpoint.Committable) (SinkWriter[T], error)

// Open implements SinkOpener.
func (f SinkFactory[T]) Open(ctx context.Context, info TaskInfo, restored []checkpoint.Committable) (SinkWriter[T], error) {
	return f(ctx, info, restored)
}

// Committer is the restore side of a two-phase-commit sink: what the
// external system (for Kafka, the transaction coordinator) says became of
// committables of its writers. Restore asks it only about committables that
// checkpoint storage holds no record of (checkpoint.Ack.Committed,
// checkpoint.CommitRecord). A sink without a Committer has every
// committable taken as resumable. Both methods return one outcome per
// committable, in order; an error means the question could not be
// answered (the restore is retried), not that a committable is lost.
type Committer interface {
	// CheckCommittables asks, changing nothing.
	CheckCommittables(ctx context.Context, cs []checkpoint.Committable) ([]CommitOutcome, error)
	// AbortCommittables aborts those still open, so that no writer can
	// commit them any more, and returns what became of each: CommitLost
	// once aborted, CommitDone if their writer committed them first. log
	// is the restoring task's.
	AbortCommittables(ctx context.Context, log *slog.Logger, cs []checkpoint.Committable) ([]CommitOutcome, error)
}
