package worker

import (
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/worker/internal/status"
)

// metrics are the worker's Prometheus metrics, fed by its observer, the
// group membership and the record counters.
type metrics struct {
	completed    *prometheus.CounterVec
	aborted      *prometheus.CounterVec
	failures     *prometheus.CounterVec
	lateDropped  *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	size         *prometheus.GaugeVec
	incremental  *prometheus.GaugeVec
	lastID       *prometheus.GaugeVec
	offset       *prometheus.GaugeVec
	pause        *prometheus.HistogramVec
	alignment    *prometheus.HistogramVec
	pending      *prometheus.GaugeVec
	rebalances   prometheus.Counter
	tasksStarted prometheus.Counter
	assigned     prometheus.Gauge
	jobStopped   *prometheus.GaugeVec
	handoffStop  *prometheus.HistogramVec
	restore      prometheus.Histogram
	firstRecord  prometheus.Histogram
	records      *recordsCollector
	collectable  []prometheus.Collector

	httpAddr string // where the worker serves them, once known
}

func newMetrics(job string, st *Stats) *metrics {
	constLabels := prometheus.Labels{"job": job}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: constLabels}, labels)
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: constLabels}, labels)
	}
	handoffBuckets := prometheus.ExponentialBuckets(0.01, 2, 14) // 10ms .. 80s
	m := &metrics{
		completed: counter("weir_checkpoints_completed_total", "Completed checkpoints.", "task"),
		aborted:   counter("weir_checkpoints_aborted_total", "Aborted (failed or timed out) checkpoints.", "task"),
		failures:  counter("weir_task_failures_total", "Task failures (each followed by a restart unless the task gave up).", "task"),
		lateDropped: counter("weir_late_records_dropped_total", "Records an operator dropped for being behind its watermark (late) "+
			"that nothing takes: a window's, when its late records are not used, or a join's (replays after a restore included).", "task", "operator"),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "weir_checkpoint_duration_seconds", Help: "Time from trigger to durable manifest.", ConstLabels: constLabels,
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}, []string{"task"}),
		size:        gauge("weir_checkpoint_size_bytes", "State size of the last completed checkpoint.", "task"),
		incremental: gauge("weir_checkpoint_incremental_bytes", "Bytes the last completed checkpoint uploaded anew.", "task"),
		lastID:      gauge("weir_checkpoint_last_id", "Id of the last completed checkpoint.", "task"),
		offset:      gauge("weir_source_checkpointed_offset", "Input offset of the last completed checkpoint (the lag group has it too).", "topic", "partition"),
		pause: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "weir_barrier_pause_seconds", Help: "Synchronous part of a checkpoint at a source's chain.", ConstLabels: constLabels,
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"task"}),
		alignment: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "weir_alignment_seconds", Help: "Time an operator's inputs were blocked aligning barriers.", ConstLabels: constLabels,
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"task", "operator"}),
		pending: gauge("weir_pending_transactions", "Pre-committed transactions of the last completed checkpoint, committed once it completed (at most the sink's pool size).", "task"),
		rebalances: prometheus.NewCounter(prometheus.CounterOpts{Name: "weir_rebalances_total",
			Help: "Group rebalances this worker took part in (assignments received).", ConstLabels: constLabels}),
		tasksStarted: prometheus.NewCounter(prometheus.CounterOpts{Name: "weir_tasks_started_total",
			Help: "Tasks this worker started (assigned or static).", ConstLabels: constLabels}),
		assigned: prometheus.NewGauge(prometheus.GaugeOpts{Name: "weir_tasks_assigned",
			Help: "Tasks the group assigns to this worker now.", ConstLabels: constLabels}),
		jobStopped: gauge("weir_job_stopped", "1 once the job stopped on this worker for good, by reason: the layout of its topics changed "+
			"(partitions_changed, topic_recreated, topic_deleted), its topics' partition counts differ (partition_counts_differ), or "+
			"an internal topic holds an earlier run's records (internal_topic_not_empty); /readyz says more.", "reason"),
		handoffStop: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "weir_handoff_stop_seconds", Help: "Time to stop a task given up, from the revoke until its state is released; drained says whether a final checkpoint committed.", ConstLabels: constLabels,
			Buckets: handoffBuckets,
		}, []string{"drained"}),
		restore: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "weir_handoff_restore_seconds", Help: "Time from a task's assignment until it restored its checkpoint and opened its sinks.", ConstLabels: constLabels,
			Buckets: handoffBuckets,
		}),
		firstRecord: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "weir_handoff_first_record_seconds", Help: "Time from a task's assignment until it processed its first record.", ConstLabels: constLabels,
			Buckets: handoffBuckets,
		}),
		records: &recordsCollector{st: st,
			in:  prometheus.NewDesc("weir_records_in_total", "Input records decoded, per task (replays after a restore included).", []string{"task"}, constLabels),
			out: prometheus.NewDesc("weir_records_out_total", "Output records written, per task (rewrites after a restore included).", []string{"task"}, constLabels),
			dead: prometheus.NewDesc("weir_dead_letters_total", "Records written to --dead-letter, per task, by reason: decode (the decoder refused it) "+
				"or mis_keyed (keyed by another task's key); again after a restore.", []string{"task", "reason"}, constLabels),
		},
	}
	m.collectable = []prometheus.Collector{m.completed, m.aborted, m.failures, m.lateDropped, m.duration, m.size, m.incremental, m.lastID, m.offset,
		m.pause, m.alignment, m.pending, m.rebalances, m.tasksStarted, m.assigned, m.jobStopped, m.handoffStop, m.restore, m.firstRecord, m.records}
	for _, r := range stopReasons {
		m.jobStopped.WithLabelValues(r).Set(0)
	}
	return m
}

func (m *metrics) register(r prometheus.Registerer) error {
	for _, c := range m.collectable {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// taskCounts are one task's record counters: read, written, and
// dead-lettered (not decoded, or keyed by another task's key).
type taskCounts struct{ in, out, undecoded, misKeyed atomic.Int64 }

// task returns the counters of task t.
func (s *Stats) task(t int) *taskCounts {
	if c, ok := s.perTask.Load(t); ok {
		return c.(*taskCounts)
	}
	c, _ := s.perTask.LoadOrStore(t, &taskCounts{})
	return c.(*taskCounts)
}

// taskCounts returns the records task t read and wrote, 0 and 0 for a
// task that has none yet (without making its counters).
func (s *Stats) taskCounts(t int) (in, out int64) {
	if c, ok := s.perTask.Load(t); ok {
		return c.(*taskCounts).in.Load(), c.(*taskCounts).out.Load()
	}
	return 0, 0
}

// recordsCollector reports the per-task record counters at each scrape.
type recordsCollector struct {
	st            *Stats
	in, out, dead *prometheus.Desc
}

func (r *recordsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- r.in
	ch <- r.out
	ch <- r.dead
}

func (r *recordsCollector) Collect(ch chan<- prometheus.Metric) {
	r.st.perTask.Range(func(k, v any) bool {
		t, c := strconv.Itoa(k.(int)), v.(*taskCounts)
		ch <- prometheus.MustNewConstMetric(r.in, prometheus.CounterValue, float64(c.in.Load()), t)
		ch <- prometheus.MustNewConstMetric(r.out, prometheus.CounterValue, float64(c.out.Load()), t)
		ch <- prometheus.MustNewConstMetric(r.dead, prometheus.CounterValue, float64(c.undecoded.Load()), t, "decode")
		ch <- prometheus.MustNewConstMetric(r.dead, prometheus.CounterValue, float64(c.misKeyed.Load()), t, "mis_keyed")
		return true
	})
}

// observer logs checkpoints and hand-offs, feeds the metrics and the status
// page, and hands completed checkpoints' positions to the lag committer. It
// never blocks.
type observer struct {
	w       *worker
	log     *slog.Logger
	metrics *metrics
	lag     *lagCommitter // nil: no lag commits
	extra   engine.Observer
}

var _ engine.Observer = (*observer)(nil)

func (o *observer) BarrierPause(job string, task int, id checkpoint.ID, d time.Duration) {
	o.metrics.pause.WithLabelValues(strconv.Itoa(task)).Observe(d.Seconds())
	o.extra.BarrierPause(job, task, id, d)
}

func (o *observer) Alignment(job string, task int, operator string, id checkpoint.ID, d time.Duration) {
	o.metrics.alignment.WithLabelValues(strconv.Itoa(task), operator).Observe(d.Seconds())
	o.extra.Alignment(job, task, operator, id, d)
}

func (o *observer) CheckpointCompleted(job string, task int, m checkpoint.Manifest) {
	d := time.Since(m.Timestamp) // Timestamp is the trigger time
	size, incr := manifestSize(m)
	t := strconv.Itoa(task)
	o.metrics.completed.WithLabelValues(t).Inc()
	o.metrics.duration.WithLabelValues(t).Observe(d.Seconds())
	o.metrics.size.WithLabelValues(t).Set(float64(size))
	o.metrics.incremental.WithLabelValues(t).Set(float64(incr))
	o.metrics.lastID.WithLabelValues(t).Set(float64(m.Checkpoint))
	var positions []checkpoint.SourcePosition
	pending := 0
	for _, a := range m.Operators {
		pending += len(a.Committables)
		for _, p := range a.Sources {
			positions = append(positions, p)
			if p.Topic != "" {
				o.metrics.offset.WithLabelValues(p.Topic, strconv.Itoa(int(p.Partition))).Set(float64(p.Offset))
			}
		}
	}
	o.metrics.pending.WithLabelValues(t).Set(float64(pending))
	o.log.Info("checkpoint completed", "task", task, "checkpoint", m.Checkpoint,
		"duration", d.Round(time.Millisecond), "size", size, "positions", formatPositions(positions))
	if o.w != nil {
		o.w.setTask(task, func(s *status.Task) {
			s.Positions = positions
			s.AddCheckpoint(status.Checkpoint{ID: m.Checkpoint, Time: m.Timestamp, Duration: d, Size: size, Incremental: incr})
		})
	}
	if o.lag != nil {
		o.lag.offer(task, positions)
	}
	o.extra.CheckpointCompleted(job, task, m)
}

func (o *observer) CheckpointAborted(job string, task int, id checkpoint.ID, err error) {
	o.metrics.aborted.WithLabelValues(strconv.Itoa(task)).Inc() // the runtime logs it
	o.extra.CheckpointAborted(job, task, id, err)
}

func (o *observer) TaskFailed(job string, task int, err error, restarting bool) {
	o.metrics.failures.WithLabelValues(strconv.Itoa(task)).Inc() // the runtime logs it
	if o.w != nil {
		o.w.setTask(task, func(s *status.Task) { s.Err = err.Error() })
	}
	o.extra.TaskFailed(job, task, err, restarting)
}

func (o *observer) TaskRestored(job string, task int, epoch int64, from checkpoint.ID, d time.Duration) {
	since := d
	if o.w != nil {
		o.w.setTask(task, func(s *status.Task) {
			if !s.Assigned.IsZero() {
				since = time.Since(s.Assigned)
			}
			s.State, s.Since, s.RestoredFrom, s.Restore, s.Err = status.Running, time.Now(), from, since, ""
		})
	}
	o.metrics.restore.Observe(since.Seconds())
	o.log.Info("task restored", "task", task, "epoch", epoch, "from_checkpoint", from, "took", since.Round(time.Millisecond))
	if o.lag != nil {
		o.lag.restored(task)
	}
	o.extra.TaskRestored(job, task, epoch, from, d)
}

func (o *observer) LateDropped(job string, task int, operator string) {
	o.metrics.lateDropped.WithLabelValues(strconv.Itoa(task), operator).Inc()
	o.extra.LateDropped(job, task, operator)
}

func (o *observer) FirstRecord(job string, task int, d time.Duration) {
	since := d
	if o.w != nil {
		o.w.setTask(task, func(s *status.Task) {
			if !s.Assigned.IsZero() {
				since = time.Since(s.Assigned)
			}
			s.FirstRecord = since
		})
	}
	o.metrics.firstRecord.Observe(since.Seconds())
	o.log.Info("task first record", "task", task, "since_assigned", since.Round(time.Millisecond))
	o.extra.FirstRecord(job, task, d)
}

// manifestSize is the state size of a checkpoint and the bytes it uploaded
// anew: the sums over its state handles.
func manifestSize(m checkpoint.Manifest) (size, incremental int64) {
	for _, a := range m.Operators {
		if a.State != nil {
			size += a.State.Size
			incremental += a.State.Incremental
		}
	}
	return size, incremental
}

func formatPositions(ps []checkpoint.SourcePosition) string {
	var b []byte
	for i, p := range ps {
		if i > 0 {
			b = append(b, ' ')
		}
		b = append(b, p.Topic...)
		b = append(b, '/')
		b = strconv.AppendInt(b, int64(p.Partition), 10)
		b = append(b, '@')
		b = strconv.AppendInt(b, p.Offset, 10)
	}
	return string(b)
}

func itoa(n int) string { return strconv.Itoa(n) }
