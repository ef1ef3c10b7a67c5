package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/runtime"
	"github.com/weirstream/weir/sink"
	"github.com/weirstream/weir/source"
	"github.com/weirstream/weir/state"
)

// worker runs one job with one configuration. The zero values of log,
// stats and extra are usable defaults.
type worker struct {
	cfg   Config
	log   *slog.Logger
	stats *recordStats
	// extra hears what the worker's own observer hears (the demo prints
	// from it).
	extra runtime.Observer
	// storage, if set, is used instead of opening cfg.Checkpoints (the
	// memory storage lives only as long as the value).
	storage checkpoint.Storage
	// drain, when closed, stops the job gracefully (runtime.Config.Drain).
	drain <-chan struct{}
}

// newLogger returns a text logger on w at level.
func newLogger(w io.Writer, level string) *slog.Logger {
	l, _ := parseLevel(level)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}

// run runs the worker's tasks until w.drain is closed (sources stop, a
// final checkpoint commits everything read, it returns nil), ctx is
// cancelled (it returns nil) or a task fails for good. Errors in the settings
// that only show once Kafka is asked (a task beyond the input's partitions)
// are usageErrors.
//
// Cancelling ctx stops the tasks where they are, without a final
// checkpoint. Nothing is lost: a restart restores the last checkpoint,
// commits its pre-committed transactions and redoes the rest; the
// transactions open at the stop stay invisible to read_committed readers.
func (w *worker) run(ctx context.Context) error {
	c := &w.cfg
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	if w.stats == nil {
		w.stats = &recordStats{}
	}
	if w.extra == nil {
		w.extra = runtime.NopObserver{}
	}
	log := w.log
	for _, warning := range c.Warnings() {
		log.Warn(warning)
	}

	parts, err := source.PartitionCount(ctx, c.Brokers, []string{c.Input})
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return usageError{fmt.Errorf("--input: %w", err)}
	}
	if err != nil {
		return fmt.Errorf("--input %s: %w", c.Input, err)
	}
	tasks := c.Tasks
	if len(tasks) == 0 {
		for p := range parts {
			tasks = append(tasks, p)
		}
	}
	for _, t := range tasks {
		if t >= parts {
			return usageError{fmt.Errorf("--tasks: task %d has no partition: input %s has %d partitions (0..%d)", t, c.Input, parts, parts-1)}
		}
	}

	storage := w.storage
	if storage == nil {
		if storage, err = checkpoint.Open(ctx, c.Checkpoints); err != nil {
			return usageError{fmt.Errorf("--checkpoints: %w", err)}
		}
	}
	plan, err := buildPlan(c, w.stats)
	if err != nil {
		return usageError{err}
	}

	reg := prometheus.NewRegistry()
	m := newMetrics(c.name(), w.stats)
	if err := m.register(reg); err != nil {
		return err
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if c.MetricsAddr != "" {
		addr, stop, err := serveMetrics(ctx, c.MetricsAddr, reg, log)
		if err != nil {
			return usageError{fmt.Errorf("--metrics-addr: %w", err)}
		}
		defer stop()
		log.Info("serving metrics", "addr", addr, "metrics", "http://"+addr+"/metrics", "healthz", "http://"+addr+"/healthz")
	}

	committer, err := source.NewCommitter(c.Brokers, lagGroup(c))
	if err != nil {
		return err
	}
	lag := newLagCommitter(committer, log)
	lagDone := make(chan struct{})
	lagCtx, stopLag := context.WithCancel(context.WithoutCancel(ctx))
	go func() { defer close(lagDone); lag.run(lagCtx) }()
	defer func() {
		stopLag()
		<-lagDone
		committer.Close()
	}()

	rc := runtime.Config{
		Tasks:   tasks,
		Storage: storage,
		Checkpoint: checkpoint.Config{
			Interval:          c.Interval,
			Timeout:           c.CheckpointTimeout,
			MinPause:          c.MinPause,
			TolerableFailures: c.TolerableFailures,
		},
		Mode:         runtime.ExactlyOnce,
		StateBackend: stateBackend(c, log),
		StateDir:     c.StateDir,
		Epoch:        c.Epoch,
		// The restart backoff must fit in the time CheckTimeout allowed
		// for a restart, with room for the restore itself.
		MaxRestartBackoff: max(c.RestartAllowance/2, 100*time.Millisecond),
		Logger:            log,
		Observer:          &observer{log: log, metrics: m, lag: lag, extra: w.extra},
		Drain:             w.drain,
	}
	if c.delivery() != sink.ExactlyOnce {
		rc.Mode = runtime.AtLeastOnce
	} else {
		rc.CheckCommittables = checkCommittables(c.Brokers)
	}
	log.Info("starting", "job", c.Job, "name", c.name(), "input", c.Input, "output", c.Output,
		"tasks", tasks, "partitions", parts, "checkpoints", c.Checkpoints, "state_backend", c.StateBackend,
		"delivery", c.delivery(), "epoch", c.Epoch)
	err = runtime.Run(ctx, plan, rc)
	if err != nil {
		return fmt.Errorf("job %s: %w", c.name(), err)
	}
	log.Info("stopped", "records_in", w.stats.in.Load(), "records_out", w.stats.out.Load())
	return nil
}

// stateBackend opens the keyed state c asks for. The Pebble stores of one
// worker share one block cache.
func stateBackend(c *Config, log *slog.Logger) state.Factory {
	if c.StateBackend == stateBackendMemory {
		return state.NewMemory(state.MemoryOptions{})
	}
	return state.NewPebble(state.PebbleOptions{
		MemTableSize: c.StateMemtableSize,
		CacheSize:    c.StateCacheSize,
		Logger:       log.With("component", "pebble"),
	})
}

// checkCommittables adapts sink.Check, the transaction coordinator's record
// of each pre-committed transaction, to the runtime's restore check. A
// client per call: restores are rare.
func checkCommittables(brokers []string) func(context.Context, []checkpoint.Committable) ([]runtime.CommitOutcome, error) {
	return func(ctx context.Context, cs []checkpoint.Committable) ([]runtime.CommitOutcome, error) {
		if len(cs) == 0 {
			return nil, nil
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
		if err != nil {
			return nil, fmt.Errorf("kafka client: %w", err)
		}
		defer cl.Close()
		sts, err := sink.Check(ctx, cl, cs)
		if err != nil {
			return nil, err
		}
		out := make([]runtime.CommitOutcome, len(sts))
		for i, st := range sts {
			switch st.Outcome {
			case sink.Committable:
				out[i] = runtime.CommitResumable
			case sink.Committed:
				out[i] = runtime.CommitDone
			case sink.Lost:
				out[i] = runtime.CommitLost
			default:
				return nil, fmt.Errorf("transaction %s: unknown outcome %v", st.Committable.TransactionalID, st.Outcome)
			}
		}
		return out, nil
	}
}

// lagCommitter commits the positions of completed checkpoints as the lag
// group's offsets, off the observer's goroutine: the newest positions of
// each task replace older ones not yet committed.
type lagCommitter struct {
	c      *source.Committer
	log    *slog.Logger
	mu     sync.Mutex
	latest map[int][]checkpoint.SourcePosition
	wake   chan struct{}
	failed bool // a failure was logged at warn; later ones at debug
}

func newLagCommitter(c *source.Committer, log *slog.Logger) *lagCommitter {
	return &lagCommitter{c: c, log: log, latest: map[int][]checkpoint.SourcePosition{}, wake: make(chan struct{}, 1)}
}

func (l *lagCommitter) offer(task int, ps []checkpoint.SourcePosition) {
	l.mu.Lock()
	l.latest[task] = ps
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// run commits until ctx ends, then commits what is left once.
func (l *lagCommitter) run(ctx context.Context) {
	for {
		select {
		case <-l.wake:
			l.commit(ctx)
		case <-ctx.Done():
			final, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			l.commit(final)
			cancel()
			return
		}
	}
}

func (l *lagCommitter) commit(ctx context.Context) {
	l.mu.Lock()
	var ps []checkpoint.SourcePosition
	for _, t := range slices.Sorted(maps.Keys(l.latest)) {
		ps = append(ps, l.latest[t]...)
	}
	clear(l.latest)
	l.mu.Unlock()
	if len(ps) == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := l.c.CommitOffsets(cctx, ps); err != nil {
		if !l.failed {
			l.log.Warn("lag offsets not committed (monitoring only; checkpoints are unaffected)", "err", err)
			l.failed = true
		} else {
			l.log.Debug("lag offsets not committed", "err", err)
		}
	}
}
