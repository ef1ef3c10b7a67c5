package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/runtime"
)

// metrics are the worker's Prometheus metrics, fed by its observer.
type metrics struct {
	completed   *prometheus.CounterVec
	aborted     *prometheus.CounterVec
	failures    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	size        *prometheus.GaugeVec
	lastID      *prometheus.GaugeVec
	offset      *prometheus.GaugeVec
	pause       *prometheus.HistogramVec
	alignment   *prometheus.HistogramVec
	recordsIn   prometheus.CounterFunc
	recordsOut  prometheus.CounterFunc
	collectable []prometheus.Collector
}

func newMetrics(job string, st *recordStats) *metrics {
	constLabels := prometheus.Labels{"job": job}
	m := &metrics{
		completed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weir_checkpoints_completed_total", Help: "Completed checkpoints.", ConstLabels: constLabels,
		}, []string{"task"}),
		aborted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weir_checkpoints_aborted_total", Help: "Aborted (failed or timed out) checkpoints.", ConstLabels: constLabels,
		}, []string{"task"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weir_task_failures_total", Help: "Task failures (each followed by a restart unless the task gave up).", ConstLabels: constLabels,
		}, []string{"task"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "weir_checkpoint_duration_seconds", Help: "Time from trigger to durable manifest.", ConstLabels: constLabels,
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}, []string{"task"}),
		size: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "weir_checkpoint_size_bytes", Help: "State size of the last completed checkpoint.", ConstLabels: constLabels,
		}, []string{"task"}),
		lastID: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "weir_checkpoint_last_id", Help: "Id of the last completed checkpoint.", ConstLabels: constLabels,
		}, []string{"task"}),
		offset: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "weir_source_checkpointed_offset", Help: "Input offset of the last completed checkpoint (the lag group has it too).", ConstLabels: constLabels,
		}, []string{"topic", "partition"}),
		pause: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "weir_barrier_pause_seconds", Help: "Synchronous part of a checkpoint at a source's chain.", ConstLabels: constLabels,
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"task"}),
		alignment: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "weir_alignment_seconds", Help: "Time an operator's inputs were blocked aligning barriers.", ConstLabels: constLabels,
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"task", "operator"}),
		recordsIn: prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "weir_records_in_total", Help: "Input records decoded (replays after a restore included).", ConstLabels: constLabels,
		}, func() float64 { return float64(st.in.Load()) }),
		recordsOut: prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "weir_records_out_total", Help: "Output records written (rewrites after a restore included).", ConstLabels: constLabels,
		}, func() float64 { return float64(st.out.Load()) }),
	}
	m.collectable = []prometheus.Collector{m.completed, m.aborted, m.failures, m.duration, m.size, m.lastID, m.offset, m.pause, m.alignment, m.recordsIn, m.recordsOut}
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

// serveMetrics serves /metrics and /healthz on addr until ctx ends. It
// returns the address it listens on (for port 0).
func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry, log *slog.Logger) (string, func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "err", err)
		}
	}()
	stop := func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-done
	}
	return ln.Addr().String(), stop, nil
}

// observer logs checkpoints, feeds the metrics and hands completed
// checkpoints' positions to the lag committer. It never blocks.
type observer struct {
	runtime.NopObserver
	log     *slog.Logger
	metrics *metrics
	lag     *lagCommitter // nil: no lag commits
	extra   runtime.Observer
}

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
	size := manifestSize(m)
	t := strconv.Itoa(task)
	o.metrics.completed.WithLabelValues(t).Inc()
	o.metrics.duration.WithLabelValues(t).Observe(d.Seconds())
	o.metrics.size.WithLabelValues(t).Set(float64(size))
	o.metrics.lastID.WithLabelValues(t).Set(float64(m.Checkpoint))
	var positions []checkpoint.SourcePosition
	for _, a := range m.Operators {
		for _, p := range a.Sources {
			positions = append(positions, p)
			if p.Topic != "" {
				o.metrics.offset.WithLabelValues(p.Topic, strconv.Itoa(int(p.Partition))).Set(float64(p.Offset))
			}
		}
	}
	o.log.Info("checkpoint completed", "task", task, "checkpoint", m.Checkpoint,
		"duration", d.Round(time.Millisecond), "size", size, "positions", formatPositions(positions))
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
	o.extra.TaskFailed(job, task, err, restarting)
}

// manifestSize is the state size of a checkpoint: the sum of its state
// handles' sizes.
func manifestSize(m checkpoint.Manifest) int64 {
	var n int64
	for _, a := range m.Operators {
		if a.State != nil {
			n += a.State.Size
		}
	}
	return n
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
