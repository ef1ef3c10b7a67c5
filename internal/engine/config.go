package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/align"
	"github.com/weirstream/weir/state"
)

// Mode is the consistency a job's checkpoints give: ExactlyOnce aligns
// barriers at operators with several inputs, so a checkpoint's state reflects
// exactly the records before its barriers; AtLeastOnce never blocks an input,
// and after a restore some records may be processed twice.
type Mode = align.Mode

const (
	ExactlyOnce = align.ExactlyOnce
	AtLeastOnce = align.AtLeastOnce
)

// Config says how to run a job's tasks. The zero value of each field is its
// documented default, filled in by Validate.
type Config struct {
	// Tasks are the task indexes Run runs (a Runner is told by Start).
	Tasks []int
	// Storage holds checkpoints. Required.
	Storage checkpoint.Storage
	// Checkpoint sets interval, timeout, min pause and tolerable failures.
	Checkpoint checkpoint.Config
	// Retained is how many completed checkpoints of each task to keep
	// (default 3); older ones and the files only they reference are
	// deleted after each completed checkpoint. Negative keeps everything.
	Retained int
	// Mode is ExactlyOnce by default.
	Mode Mode
	// StateBackend opens keyed state; default: the memory backend.
	StateBackend state.Factory
	// StateDir is where backends keep local files; default: a directory
	// under os.TempDir() named after the job.
	StateDir string
	// BatchSize is how many records a task hands a multi-input operator
	// per send on its channel (default DefaultBatchSize), and
	// ChannelCapacity how many such batches each of its input channels
	// holds (default DefaultChannelCapacity): a full channel blocks the
	// sender, which is how backpressure travels upstream. Together they
	// bound the records in flight between a task's goroutines.
	BatchSize       int
	ChannelCapacity int
	// Epoch is the fencing epoch of the tasks Run runs, written into their
	// manifests (a Runner is told by Start). It must be larger than that of
	// every earlier owner of the tasks: checkpoint.NextEpoch allocates one.
	Epoch int64
	// RestartBackoff is the first wait before a failed task restarts
	// (default 100ms); it doubles on each consecutive failure up to
	// MaxRestartBackoff (default 30s).
	RestartBackoff    time.Duration
	MaxRestartBackoff time.Duration
	// Reachable, if set, says whether what the tasks need outside the
	// process (the broker, the checkpoint store) answers. A task waiting
	// out its restart backoff asks it every ProbeInterval (default
	// 250ms): once it has failed since the task last completed a
	// checkpoint and then answers, the fault is over, so the task
	// restarts at once and its backoff and restart count start over. A
	// broker back after a restart then costs the tasks a probe interval,
	// not the rest of a backoff grown while it was down. It is called by
	// every waiting task: it should be cheap and may answer from a
	// recent probe.
	Reachable     func(ctx context.Context) error
	ProbeInterval time.Duration
	// MaxRestarts bounds consecutive restarts of a task; past it Run fails.
	// 0 means the default (10); negative means no bound.
	MaxRestarts int
	// AllowNonRestoredState restores a checkpoint that has the state or
	// source positions of operators the job no longer has (removed or
	// renamed), dropping them, as Flink's --allowNonRestoredState: a
	// renamed source then reads from its start position. Pending
	// transactions of a removed sink are never dropped.
	AllowNonRestoredState bool
	// Partitions is the partition count of the job's input topics, which
	// is its number of tasks. With it, every keyed operator checks that
	// the key of each record is one Partitioner sends to the record's task
	// (the keyed invariant: a KeyBy declares that the input is partitioned
	// by its key); a record of another task's key is a MisKeyedError, or
	// goes to BadRecords. 0, the default, checks nothing: for inputs that
	// nothing partitioned, as slices in tests.
	Partitions int
	// Partitioner is the partitioner of the producers of every topic the
	// job reads: one for the job, so that a key is in the same task in
	// each (a worker writes its repartition topics with the input's).
	// Default: Kafka's murmur2 (the Java client's, franz-go's).
	Partitioner Partitioner
	// BadRecords, if set, takes the records the task would otherwise fail
	// on for their key (MisKeyedError), and the task goes on without them;
	// nil: they fail the task.
	BadRecords BadRecords
	Logger     *slog.Logger
	// Observer hears about barriers and checkpoints (metrics, status page).
	Observer Observer
	// Drain, when closed, stops the job gracefully: every task stops reading
	// its sources, takes a final checkpoint, commits it, and Run returns nil
	// (a Runner's tasks drain as on Stop).
	// Cancelling Run's context instead stops at once, without a checkpoint.
	Drain <-chan struct{}
	// Now is the processing-time clock; default time.Now.
	Now func() time.Time
}

// CommitOutcome is what became of a pre-committed transaction.
type CommitOutcome int

const (
	// CommitResumable: still open, it can be committed.
	CommitResumable CommitOutcome = iota
	// CommitDone: already committed.
	CommitDone
	// CommitLost: aborted or fenced; its output is gone.
	CommitLost
	// CommitUnknown: the external system keeps no record of it any more
	// (for Kafka: the transactional id expired, or was re-initialised
	// under another producer id), and checkpoint storage holds no record
	// of its commit either. Whether its output is visible cannot be told:
	// restore neither resumes it nor walks back past it, and fails loudly.
	CommitUnknown
)

func (o CommitOutcome) String() string {
	switch o {
	case CommitResumable:
		return "resumable"
	case CommitDone:
		return "committed"
	case CommitLost:
		return "lost"
	case CommitUnknown:
		return "unknown"
	}
	return fmt.Sprintf("CommitOutcome(%d)", int(o))
}

// Validate fills in defaults and reports every invalid setting by name.
func (c *Config) Validate(job string) error {
	var errs []error
	seen := map[int]bool{}
	for _, t := range c.Tasks {
		if t < 0 {
			errs = append(errs, fmt.Errorf("tasks: %d is negative", t))
		}
		if seen[t] {
			errs = append(errs, fmt.Errorf("tasks: %d listed twice", t))
		}
		seen[t] = true
	}
	if c.Storage == nil {
		errs = append(errs, errors.New("checkpoint storage: required"))
	}
	if err := c.Checkpoint.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Mode != ExactlyOnce && c.Mode != AtLeastOnce {
		errs = append(errs, fmt.Errorf("mode: unknown %v", c.Mode))
	}
	if c.RestartBackoff < 0 || c.MaxRestartBackoff < 0 {
		errs = append(errs, errors.New("restart backoff: must not be negative"))
	}
	if c.ProbeInterval < 0 {
		errs = append(errs, errors.New("probe interval: must not be negative"))
	}
	if c.BatchSize < 0 {
		errs = append(errs, fmt.Errorf("batch size: %d is negative", c.BatchSize))
	}
	if c.ChannelCapacity < 0 {
		errs = append(errs, fmt.Errorf("channel capacity: %d is negative", c.ChannelCapacity))
	}
	if c.Partitions < 0 {
		errs = append(errs, fmt.Errorf("partitions: %d is negative", c.Partitions))
	}
	for _, t := range c.Tasks {
		if c.Partitions > 0 && t >= c.Partitions {
			errs = append(errs, fmt.Errorf("tasks: %d has no partition: the input has %d (tasks 0..%d)", t, c.Partitions, c.Partitions-1))
		}
	}
	if c.Partitioner == nil {
		c.Partitioner = defaultPartitioner
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.ChannelCapacity == 0 {
		c.ChannelCapacity = DefaultChannelCapacity
	}
	if c.StateBackend == nil {
		c.StateBackend = state.NewMemory(state.MemoryOptions{})
	}
	if c.StateDir == "" {
		c.StateDir = filepath.Join(os.TempDir(), "weir-state", job)
	}
	if c.RestartBackoff == 0 {
		c.RestartBackoff = 100 * time.Millisecond
	}
	if c.MaxRestartBackoff == 0 {
		c.MaxRestartBackoff = 30 * time.Second
	}
	if c.Retained == 0 {
		c.Retained = checkpoint.DefaultRetained
	}
	if c.ProbeInterval == 0 {
		c.ProbeInterval = 250 * time.Millisecond
	}
	if c.MaxRestarts == 0 {
		c.MaxRestarts = 10
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Observer == nil {
		c.Observer = NopObserver{}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return errors.Join(errs...)
}

// Observer hears what the runtime does, for metrics and status pages. Calls
// come from several goroutines and must not block.
type Observer interface {
	// BarrierPause is how long a source's chain stopped processing to take
	// the synchronous part of checkpoint id.
	BarrierPause(job string, task int, id checkpoint.ID, d time.Duration)
	// Alignment is how long an operator's inputs were blocked aligning id.
	Alignment(job string, task int, operator string, id checkpoint.ID, d time.Duration)
	CheckpointCompleted(job string, task int, m checkpoint.Manifest)
	CheckpointAborted(job string, task int, id checkpoint.ID, err error)
	// TaskFailed reports a task failure; restarting says whether it will be
	// restarted.
	TaskFailed(job string, task int, err error, restarting bool)
	// TaskRestored: an attempt of the task by the owner with epoch restored
	// checkpoint from (0: none, a fresh start) and opened its sinks, d after
	// the attempt began; it processes records from now on.
	TaskRestored(job string, task int, epoch int64, from checkpoint.ID, d time.Duration)
	// FirstRecord: an attempt of the task processed its first record, d
	// after the attempt began.
	FirstRecord(job string, task int, d time.Duration)
	// LateDropped: operator dropped a record behind its watermark (late)
	// that nothing takes: a window's, when its late records are not used,
	// or a join's. It is called once per record.
	LateDropped(job string, task int, operator string)
}

// NopObserver ignores everything; embed it to observe a part.
type NopObserver struct{}

func (NopObserver) BarrierPause(string, int, checkpoint.ID, time.Duration)        {}
func (NopObserver) Alignment(string, int, string, checkpoint.ID, time.Duration)   {}
func (NopObserver) CheckpointCompleted(string, int, checkpoint.Manifest)          {}
func (NopObserver) CheckpointAborted(string, int, checkpoint.ID, error)           {}
func (NopObserver) TaskFailed(string, int, error, bool)                           {}
func (NopObserver) TaskRestored(string, int, int64, checkpoint.ID, time.Duration) {}
func (NopObserver) FirstRecord(string, int, time.Duration)                        {}
func (NopObserver) LateDropped(string, int, string)                               {}
