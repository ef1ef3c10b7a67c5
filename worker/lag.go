package worker

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/source"
)

// lagCommitter commits the positions of completed checkpoints as the lag
// group's offsets, off the observer's goroutine: the newest positions of
// each task replace older ones not yet committed. Tools that show consumer
// lag (kafka-consumer-groups.sh, Burrow) read that group.
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

// lagCollector reports, at each scrape, the consumer lag of every input
// partition of the tasks this worker runs: the partition's end offset
// (read_committed: its last stable offset) minus the position of the
// task's last completed checkpoint, as the lag group shows it.
type lagCollector struct {
	w    *worker
	ends func(ctx context.Context, topic string) (map[int32]int64, error)
	desc *prometheus.Desc
}

func newLagCollector(w *worker, c *source.Committer) *lagCollector {
	return &lagCollector{w: w, ends: c.EndOffsets, desc: prometheus.NewDesc("weir_consumer_lag_records",
		"Records of an input partition after the last completed checkpoint of the task that runs it (last stable offset minus the checkpointed position).",
		[]string{"topic", "partition"}, prometheus.Labels{"job": w.cfg.name()})}
}

func (l *lagCollector) Describe(ch chan<- *prometheus.Desc) { ch <- l.desc }

func (l *lagCollector) Collect(ch chan<- prometheus.Metric) {
	positions := l.w.positions()
	if len(positions) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ends := map[string]map[int32]int64{}
	for _, p := range positions {
		if _, ok := ends[p.Topic]; ok {
			continue
		}
		e, err := l.ends(ctx, p.Topic)
		if err != nil {
			return // no figure beats a wrong one
		}
		ends[p.Topic] = e
	}
	for _, p := range positions {
		end, ok := ends[p.Topic][p.Partition]
		if !ok {
			continue
		}
		ch <- prometheus.MustNewConstMetric(l.desc, prometheus.GaugeValue, float64(max(0, end-p.Offset)), p.Topic, strconv.Itoa(int(p.Partition)))
	}
}
