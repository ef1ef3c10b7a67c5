package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/cli"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/sink"
	"github.com/weirstream/weir/source"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/worker/internal/status"
)

// Options are what a caller of Run may add to the configuration. The zero
// value is what Main uses.
type Options struct {
	// Logger receives the worker's logs; nil: text on stderr at
	// Config.LogLevel.
	Logger *slog.Logger
	// Drain, when closed, stops the worker gracefully: every task stops
	// reading, takes a final checkpoint and commits it, then the worker
	// leaves the group and Run returns nil (what SIGTERM does in Main).
	Drain <-chan struct{}
	// Storage, if set, is used instead of opening Config.Checkpoints.
	Storage checkpoint.Storage
	// Observer hears what the worker's own observer hears.
	Observer engine.Observer
	// Stats, if set, counts the records in and out.
	Stats *Stats
	// Listening, if set, is called with the address the HTTP server
	// listens on.
	Listening func(addr string)
	// StateFS, if set, is the filesystem of the Pebble state stores
	// instead of the local disk (state.PebbleOptions.FS): tests wrap the
	// disk with it to make it fail (internal/diskfault). The memory state
	// backend touches no disk and ignores it.
	StateFS vfs.FS
}

// Run runs one worker of the job cfg names among jobs until opts.Drain is
// closed and every task drained (it returns nil), ctx is cancelled (it
// returns nil: the tasks stop where they are, and their next owners
// restore their last checkpoints), or a task fails for good. Settings that
// only show as bad once Kafka or storage is asked (a missing topic, a task
// beyond the input's partitions, a missing bucket) fail as cli.UsageErrors.
//
// A job whose topics are not laid out as its checkpoints and its layout
// record say (partitions added, a topic recreated or deleted, an internal
// topic holding an earlier run's records; see layout.go) stops on the
// worker, at start or while it runs: no task runs, /readyz answers 503 with
// the error, and Run returns that error (wrapping
// checkpoint.ErrLayoutChanged where the layout changed) once opts.Drain is
// closed or ctx ends.
//
// Without Config.Tasks the worker joins the job's consumer group, which
// hands out the tasks; each task it gets runs from the latest valid
// checkpoint with the fencing epoch of that generation, and each it gives
// up stops with a final checkpoint within Config.HandoffTimeout.
func Run(ctx context.Context, cfg Config, jobs []Job, opts Options) error {
	if err := cfg.Validate(); err != nil {
		return cli.UsageError{Err: err}
	}
	if cfg.Job == "" && len(jobs) == 1 {
		cfg.Job = jobs[0].name
	}
	w := &worker{cfg: cfg, opts: opts, log: opts.Logger, stats: opts.Stats, tasks: map[int]*status.Task{}}
	if w.log == nil {
		w.log = newLogger(os.Stderr, cfg.LogLevel)
	}
	if w.stats == nil {
		w.stats = &Stats{}
	}
	if w.opts.Observer == nil {
		w.opts.Observer = engine.NopObserver{}
	}
	return w.run(ctx, jobs)
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }

// newLogger returns a text logger on w at level.
func newLogger(w io.Writer, level string) *slog.Logger {
	l, _ := parseLevel(level)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}

// worker is one running worker process of a job.
type worker struct {
	cfg     Config
	opts    Options
	log     *slog.Logger
	stats   *Stats
	storage checkpoint.Storage
	// storageID is the identity of storage for the job, which the workers
	// of a group compare (checkpoint.StorageID).
	storageID string
	plan      *engine.Plan
	// inputs and outputs are the job's Kafka topics.
	inputs, outputs []string
	parts           int
	metrics         *metrics
	runner          *engine.Runner
	group           *member // nil with static tasks
	started         time.Time
	// kgoMetrics are the kgo client metrics of the group and the sources.
	kgoMetrics *kpromSet
	// kafka are the options every Kafka client of the worker starts with
	// (Config.Security): one place, so that no client connects otherwise.
	kafka []kgo.Opt

	// layout guards the layout of the job's topics (layout.go).
	layout *layoutGuard

	// startMu orders task starts with the deletion of local state, and
	// with the job's stop.
	startMu sync.Mutex

	mu    sync.Mutex
	tasks map[int]*status.Task
	// fatal is the first error that ends the worker.
	fatal     error
	cancelRun context.CancelFunc
	// stop is why the job stopped on this worker for good (stopJob), nil
	// while it runs; stopReason is its label, stopSince when.
	stop       error
	stopReason string
	stopSince  time.Time
}

func (w *worker) run(ctx context.Context, jobs []Job) error {
	c := &w.cfg
	log := w.log
	w.started = time.Now()
	for _, warning := range c.Warnings() {
		log.Warn(warning)
	}
	if _, err := pickJob(c, jobs); err != nil {
		return cli.UsageError{Err: err}
	}

	kafka, err := c.Security.ClientOpts()
	if err != nil {
		return cli.UsageError{Err: err}
	}
	w.kafka = kafka

	// The job's graph, with the topics it reads, writes and moves keys
	// through.
	w.kgoMetrics = newKpromSet()
	plan, e, err := buildPlan(c, jobs, w.stats, w.kgoMetrics, w.kafka)
	if err != nil {
		return cli.UsageError{Err: err}
	}
	w.plan, w.inputs, w.outputs = plan, e.Inputs, e.Outputs
	internal := e.Internal
	if c.DeadLetter != "" && (slices.Contains(e.Inputs, c.DeadLetter) || slices.Contains(e.Outputs, c.DeadLetter)) {
		return cli.UsageError{Err: fmt.Errorf("--dead-letter: %q is also an input or output topic of the job", c.DeadLetter)}
	}
	// Dead letters written to a KeyBy's topic would be read back as
	// records weir wrote, which fail the task whatever the policy.
	if c.DeadLetter != "" && slices.Contains(internal, c.DeadLetter) {
		return cli.UsageError{Err: fmt.Errorf("--dead-letter: %q is an internal (repartition) topic of the job", c.DeadLetter)}
	}

	// A topic created just before the worker starts may not be in the
	// brokers' metadata yet. This is the worker's first request to Kafka,
	// so a setting that keeps it from connecting shows here. The inputs
	// must have one partition count: task p reads partition p of each.
	inputs := strings.Join(e.Inputs, ", ")
	parts, err := source.PartitionCountWait(ctx, c.Brokers, e.Inputs, 10*time.Second, w.kafka...)
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		setting := "--topic" // or the job's own names
		if c.Input != "" {
			setting = "--input"
		}
		return cli.UsageError{Err: fmt.Errorf("%s: %w", setting, err)}
	}
	var bad cli.UsageError
	if errors.As(c.Security.ExplainKafkaErr(err), &bad) {
		return cli.UsageError{Err: fmt.Errorf("connect to --brokers %s: %w", strings.Join(c.Brokers, ","), bad.Err)}
	}
	if err != nil {
		return fmt.Errorf("input %s: %w", inputs, err)
	}
	w.parts = parts
	for _, t := range c.Tasks {
		if t >= parts {
			return cli.UsageError{Err: fmt.Errorf("--tasks: task %d has no partition: input %s has %d partitions (0..%d)", t, inputs, parts, parts-1)}
		}
	}
	if err := checkDeadLetter(ctx, c, w.kafka, 10*time.Second); err != nil {
		return err
	}

	w.storage = w.opts.Storage
	if w.storage == nil {
		if w.storage, err = checkpoint.Open(ctx, c.Checkpoints); err != nil {
			return cli.UsageError{Err: fmt.Errorf("--checkpoints: %w", err)}
		}
	}
	reg := prometheus.NewRegistry()
	badRecs, closeBad, err := newBadRecords(c, w.stats, internal, w.kafka)
	if err != nil {
		return err
	}
	defer closeBad()
	stateDir, unlock, err := lockStateDir(c.stateDir())
	if err != nil {
		return cli.UsageError{Err: fmt.Errorf("--state-dir: %w", err)}
	}
	defer unlock()
	reach, closeReach, err := newReachability(c.Brokers, w.kafka, w.storage, w.opts.StateFS, stateDir, 250*time.Millisecond)
	if err != nil {
		return err
	}
	defer closeReach()
	log.Info("state directory", "dir", stateDir)

	w.metrics = newMetrics(c.name(), w.stats)
	if err := w.metrics.register(reg); err != nil {
		return err
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	committer, err := source.NewCommitter(c.Brokers, lagGroup(c), w.kafka...)
	if err != nil {
		return err
	}
	// No internal topics to purge: purging behind a task's own completed
	// checkpoints can delete records a restore still needs (a restore that
	// falls back past unusable checkpoints, a zombie owner that keeps
	// completing checkpoints). Purging waits for a bound taken from the
	// checkpoints storage retains.
	lag := newLagCommitter(committer, log, nil)
	reg.MustRegister(newLagCollector(w, committer))
	lagDone := make(chan struct{})
	lagCtx, stopLag := context.WithCancel(context.WithoutCancel(ctx))
	go func() { defer close(lagDone); lag.run(lagCtx) }()
	defer func() {
		stopLag()
		<-lagDone
		committer.Close()
	}()

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	w.cancelRun = cancel

	if c.HTTPAddr != "" && c.HTTPAddr != "off" {
		addr, stop, err := serveHTTP(runCtx, c.HTTPAddr, c.HTTPAddr == DefaultHTTPAddr, prometheus.Gatherers{reg, w.kgoMetrics}, w, log)
		if err != nil {
			return cli.UsageError{Err: fmt.Errorf("--http-addr: %w", err)}
		}
		defer stop()
		w.metrics.httpAddr = addr
		log.Info("serving status page and metrics", "addr", addr, "status", "http://"+addr+"/", "metrics", "http://"+addr+"/metrics")
		if w.opts.Listening != nil {
			w.opts.Listening(addr)
		}
	}

	// The layout before any task: a task must never start on a layout
	// the job's checkpoints were not taken under. A worker that finds it
	// changed stays up, not ready, until it is stopped: the same state
	// as when it finds the change while it runs.
	if w.layout, err = newLayoutGuard(c, w.storage, e.Inputs, internal, w.kafka, log); err != nil {
		return err
	}
	defer w.layout.close()
	if err := w.layout.start(ctx, int32(parts)); err != nil {
		if !stopsJob(err) {
			return fmt.Errorf("job %s: the layout of its topics: %w", c.name(), err)
		}
		w.stopJob(err)
		w.awaitSignal(ctx)
		return fmt.Errorf("job %s: %w", c.name(), err)
	}
	if w.plan.Keyed() {
		if err := checkPartitioner(ctx, w.storage, c.name(), c.partitioner().String(), log); err != nil {
			return err
		}
	}
	if w.storageID, err = checkpoint.StorageID(ctx, w.storage, c.name()); err != nil {
		return fmt.Errorf("job %s: %w", c.name(), err)
	}
	w.parts = int(w.layout.partitions)
	for _, t := range c.Tasks {
		if t >= w.parts {
			return cli.UsageError{Err: fmt.Errorf("--tasks: task %d has no partition: job %s has %d tasks (0..%d)", t, c.name(), w.parts, w.parts-1)}
		}
	}

	rc := engine.Config{
		Storage: w.storage,
		Checkpoint: checkpoint.Config{
			Interval:          c.Interval,
			Timeout:           c.CheckpointTimeout,
			MinPause:          c.MinPause,
			TolerableFailures: c.TolerableFailures,
		},
		Mode:                  engine.ExactlyOnce,
		StateBackend:          stateBackend(c, w.opts.StateFS, log),
		StateDir:              stateDir,
		BatchSize:             c.Memory.BatchSize,
		ChannelCapacity:       c.Memory.ChannelCapacity,
		AllowNonRestoredState: c.AllowNonRestoredState,
		// Every KeyBy is checked against the input's partitioning: a task
		// holds the keys of its partition, and only those.
		Partitions:  w.parts, // the recorded count: keys belong where it put them
		Partitioner: c.partitioner(),
		BadRecords:  badRecs,
		// The restart backoff must fit in the time CheckTimeout allowed
		// for a restart, with room for the restore itself.
		MaxRestartBackoff: max(c.RestartAllowance/2, 100*time.Millisecond),
		// A task that failed while the broker or the store was away
		// restarts as soon as they answer again.
		Reachable:     reach.check,
		ProbeInterval: reach.every,
		Logger:        log,
		Observer:      &observer{w: w, log: log, metrics: w.metrics, lag: lag, extra: w.opts.Observer},
	}
	if c.delivery() != sink.ExactlyOnce {
		rc.Mode = engine.AtLeastOnce
	}
	w.runner, err = engine.NewRunner(runCtx, w.plan, rc, w.taskEnded)
	if err != nil {
		return err
	}
	if c.StateCleanupDelay > 0 {
		cleaned := make(chan struct{})
		go func() { defer close(cleaned); w.cleanStates(runCtx, stateDir, c.StateCleanupDelay) }()
		defer func() { cancel(); <-cleaned }()
	}
	mode := "group " + c.Group()
	if len(c.Tasks) > 0 {
		mode = "static tasks"
	}
	watched := make(chan struct{})
	go func() { defer close(watched); w.watchLayout(runCtx) }()
	defer func() { cancel(); <-watched }()
	log.Info("starting", "job", c.Job, "name", c.name(), "inputs", e.Inputs, "outputs", e.Outputs, "internal", internal,
		"assignment", mode, "tasks", c.Tasks, "partitions", w.parts, "checkpoints", c.Checkpoints, "state_backend", c.StateBackend,
		"delivery", c.delivery(), "partitioner", c.partitioner(), "kafka_security", c.Security.Describe())

	if len(c.Tasks) > 0 {
		err = w.runStatic(runCtx)
	} else {
		err = w.runGroup(runCtx)
	}
	if w.stopErr() != nil {
		w.awaitSignal(runCtx)
	}
	cancel()
	w.runner.Wait()
	if serr := w.stopErr(); serr != nil {
		return fmt.Errorf("job %s: %w", c.name(), serr)
	}
	if ferr := w.fatalErr(); ferr != nil {
		return fmt.Errorf("job %s: %w", c.name(), ferr)
	}
	if err != nil {
		return fmt.Errorf("job %s: %w", c.name(), err)
	}
	in, out := w.stats.Records()
	log.Info("stopped", "records_in", in, "records_out", out)
	return nil
}

// stopsJob reports whether err stops the job on this worker for good.
func stopsJob(err error) bool {
	var se *stopError
	return errors.Is(err, checkpoint.ErrLayoutChanged) || errors.As(err, &se)
}

// stopJob stops the job on this worker for good, because of err: every
// task stops at once, without a final checkpoint (what a task processed
// under a changed layout must never commit), no task starts again (the
// group's assignments are ignored, as while draining), /readyz answers 503
// with err, weir_job_stopped says why, and the worker waits for SIGTERM.
// Only the first call does anything.
func (w *worker) stopJob(err error) {
	reason := stopReason(err)
	w.startMu.Lock() // no task starts after this
	w.mu.Lock()
	first := w.stop == nil
	if first {
		w.stop, w.stopReason, w.stopSince = err, reason, time.Now()
	}
	w.mu.Unlock()
	var running []int
	if first && w.runner != nil {
		running = w.runner.Running()
	}
	w.startMu.Unlock()
	if !first {
		return
	}
	var wg sync.WaitGroup
	for _, t := range running {
		wg.Go(func() {
			w.runner.Abort(t)
			w.setTask(t, func(s *status.Task) {
				if s.State != status.Failed {
					s.State, s.Since, s.Err = status.Stopped, time.Now(), "stopped with the job: "+reason
				}
			})
		})
	}
	wg.Wait()
	w.metrics.jobStopped.WithLabelValues(reason).Set(1)
	w.log.Error("job stopped on this worker: it cannot run correctly on its topics as they are; "+
		"no task runs here until the worker is stopped (SIGTERM)",
		"reason", reason, "tasks_stopped", running, "err", err)
}

// stopErr is why the job stopped on this worker, nil if it did not.
func (w *worker) stopErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stop
}

// awaitSignal waits for the drain (SIGTERM) or the end of ctx: what a
// worker whose job stopped does, serving its status until then.
func (w *worker) awaitSignal(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-w.opts.Drain:
	}
}

// watchLayout compares the layout of the job's topics with its record
// every Config.LayoutCheckInterval until ctx ends, and stops the job when
// they differ. A check Kafka does not answer is logged and tried again at
// the next tick.
func (w *worker) watchLayout(ctx context.Context) {
	tick := time.NewTicker(w.cfg.LayoutCheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if w.stopErr() != nil {
			return
		}
		w.checkLayout(ctx, "interval")
	}
}

// checkLayout compares the layout once (why: when) and stops the job if it
// changed; it reports whether the job may go on.
func (w *worker) checkLayout(ctx context.Context, why string) bool {
	err := w.layout.check(ctx)
	switch {
	case err == nil:
		return true
	case stopsJob(err):
		w.log.Info("the layout of the job's topics changed", "found_at", why)
		w.stopJob(err)
		return false
	case ctx.Err() == nil:
		w.log.Warn("cannot check the layout of the job's topics; checking again later", "at", why, "err", err)
	}
	return true
}

// runStatic runs c.Tasks with one epoch until they drained, ctx ends or
// one fails for good.
func (w *worker) runStatic(ctx context.Context) error {
	c := &w.cfg
	epoch := c.Epoch
	if epoch == 0 {
		var err error
		if epoch, err = checkpoint.NextEpoch(ctx, w.storage, c.name()); err != nil {
			return err
		}
	} else if err := checkpoint.RecordEpoch(ctx, w.storage, c.name(), epoch); err != nil {
		return err // allocations must go above it
	}
	w.log.Info("static tasks", "tasks", c.Tasks, "epoch", epoch)
	for _, t := range c.Tasks {
		w.startTask(t, epoch)
	}
	done := make(chan struct{})
	go func() { w.runner.Wait(); close(done) }() // ends with the tasks
	select {
	case <-done:
	case <-ctx.Done():
	case <-w.opts.Drain:
		err := w.drainAll(c.HandoffTimeout)
		<-done
		return err
	}
	return nil
}

// drainAll stops every task gracefully within bound, in parallel: a task
// whose final checkpoint does not complete in time stops where it is. It
// returns an error naming each task that did not drain, so that the
// worker does not exit 0 (exit 0 after a drain says every task committed
// a final checkpoint, which changing --pool-size, --delivery or a sink
// relies on).
func (w *worker) drainAll(bound time.Duration) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for _, t := range w.runner.Running() {
		wg.Go(func() {
			if res := w.stopTask(t, bound, "drain"); !res.Drained && res.Err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("task %d: %w", t, res.Err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(errs) == 0 {
		return nil
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return fmt.Errorf("drain incomplete: %w; each of these tasks' next owner restores its last completed checkpoint and processes the rest again, "+
		"but its transactions may be open and uncommitted until then", errors.Join(errs...))
}

// startTask starts task t with epoch, unless the job stopped here.
func (w *worker) startTask(t int, epoch int64) {
	w.startMu.Lock()
	defer w.startMu.Unlock()
	if w.stopErr() != nil {
		w.log.Info("task not started: the job stopped on this worker", "task", t)
		return
	}
	w.setTask(t, func(s *status.Task) {
		s.State, s.Epoch, s.Since, s.Err = status.Restoring, epoch, time.Now(), ""
		s.Assigned = time.Now()
		s.RestoredFrom, s.Restore, s.FirstRecord = 0, 0, 0
	})
	w.metrics.tasksStarted.Inc()
	if err := w.runner.Start(t, epoch); err != nil {
		w.log.Error("start task", "task", t, "err", err)
	}
}

// stopTask stops task t gracefully within bound and logs it; why says who
// asked (revoke, drain).
func (w *worker) stopTask(t int, bound time.Duration, why string) engine.StopResult {
	if _, running := w.runner.Epoch(t); !running {
		return engine.StopResult{} // stopped already (a drain, a failure)
	}
	if w.stopErr() != nil {
		// The job stopped: what the task processed since its last
		// checkpoint may be of a changed layout, never to be committed.
		w.runner.Abort(t)
		return engine.StopResult{Err: fmt.Errorf("task %d: stopped with the job, without a final checkpoint", t)}
	}
	w.log.Info("task revoked", "task", t, "why", why)
	w.setTask(t, func(s *status.Task) { s.State, s.Since = status.Stopping, time.Now() })
	res := w.runner.Stop(t, bound)
	w.metrics.handoffStop.WithLabelValues(boolLabel(res.Drained)).Observe(res.Took.Seconds())
	w.log.Info("task released", "task", t, "why", why, "drained", res.Drained, "took", res.Took.Round(time.Millisecond), "err", res.Err)
	w.setTask(t, func(s *status.Task) {
		s.State, s.Since = status.Stopped, time.Now()
		if res.Err != nil {
			s.Err = res.Err.Error()
		}
	})
	return res
}

// abortTask stops task t at once: the worker lost it.
func (w *worker) abortTask(t int) {
	w.log.Warn("task lost with the group session: stopping it at once", "task", t)
	w.runner.Abort(t)
	w.setTask(t, func(s *status.Task) { s.State, s.Since = status.Stopped, time.Now() })
}

// taskEnded hears from the runner when a task ended. A task that fails for
// good ends the worker; one that found a newer owner is a zombie here and
// only stops (with static tasks it ends the worker, as before the group).
func (w *worker) taskEnded(t int, err error) {
	if _, again := w.runner.Epoch(t); again {
		return // started again meanwhile: this run's end is old news
	}
	switch {
	case err == nil, errors.Is(err, context.Canceled):
		return
	case engine.DownWhenStopped(err) && len(w.cfg.Tasks) == 0 && !w.draining():
		// The group moved a task that was down after a failure (a full
		// disk here, say): its next owner restores its last valid
		// checkpoint. The worker's other tasks are fine; only a drain
		// of the whole worker must not pass such a task for a clean stop.
		w.log.Warn("task handed over while down after a failure; its next owner restores its last checkpoint", "task", t, "err", err)
		w.setTask(t, func(s *status.Task) { s.State, s.Since, s.Err = status.Stopped, time.Now(), err.Error() })
		return
	case stopsJob(err):
		// Its checkpoint was taken under another layout: so was every
		// other task's, whether they noticed yet or not.
		w.setTask(t, func(s *status.Task) { s.State, s.Since, s.Err = status.Failed, time.Now(), err.Error() })
		w.stopJob(err) // it names the task
		return
	case errors.Is(err, engine.ErrSuperseded) && len(w.cfg.Tasks) == 0:
		w.log.Error("task stopped: a newer owner has it; giving it back to the group", "task", t, "err", err)
		w.setTask(t, func(s *status.Task) { s.State, s.Since, s.Err = status.Superseded, time.Now(), err.Error() })
		if g := w.membership(); g != nil {
			g.giveUp(t)
		}
		return
	}
	w.setTask(t, func(s *status.Task) { s.State, s.Since, s.Err = status.Failed, time.Now(), err.Error() })
	w.fail(err)
}

// draining reports whether the whole worker is draining (SIGTERM).
func (w *worker) draining() bool {
	m := w.membership()
	return m != nil && m.draining.Load()
}

func (w *worker) fail(err error) {
	w.mu.Lock()
	if w.fatal == nil {
		w.fatal = err
	}
	cancel := w.cancelRun
	w.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

func (w *worker) fatalErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fatal
}

// stateBackend opens the keyed state c asks for, on fsys if not nil. The
// Pebble stores of one worker share one block cache.
func stateBackend(c *Config, fsys vfs.FS, log *slog.Logger) state.Factory {
	if c.StateBackend == stateBackendMemory {
		return state.NewMemory(state.MemoryOptions{})
	}
	deltaMemory := c.StateDeltaMemory
	if deltaMemory == 0 {
		deltaMemory = -1 // none; 0 is Pebble's default
	}
	return state.NewPebble(state.PebbleOptions{
		MemTableSize: c.StateMemtableSize,
		CacheSize:    c.StateCacheSize,
		DeltaMemory:  deltaMemory,
		Logger:       log.With("component", "pebble"),
		FS:           fsys,
	})
}

func boolLabel(b bool) string {
	if b {
		return "true"
	}
	return "false"
}
