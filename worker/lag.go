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
//
// Given internal (repartition) topics, it also purges them, as Kafka
// Streams does: once a task completed checkpoint.DefaultRetained
// checkpoints here, the records of its internal partitions before the
// least positions of the last ones are deleted. The worker gives it none:
// a bound from one worker's completions is not safe with several owners
// (a zombie keeps completing) or after a restore that falls back past
// unusable checkpoints; the history is cleared on restore regardless.
type lagCommitter struct {
	c        *source.Committer
	log      *slog.Logger
	internal map[string]bool
	purger   func(context.Context, []checkpoint.SourcePosition) error
	mu       sync.Mutex
	latest   map[int][]checkpoint.SourcePosition
	history  map[int][][]checkpoint.SourcePosition // per task, its internal positions at its last completions here
	purge    map[int][]checkpoint.SourcePosition
	wake     chan struct{}
	failed   bool // a failure was logged at warn; later ones at debug
	purgeErr bool // likewise, for purges
}

func newLagCommitter(c *source.Committer, log *slog.Logger, internal []string) *lagCommitter {
	l := &lagCommitter{c: c, log: log, internal: map[string]bool{}, latest: map[int][]checkpoint.SourcePosition{},
		history: map[int][][]checkpoint.SourcePosition{}, purge: map[int][]checkpoint.SourcePosition{}, wake: make(chan struct{}, 1)}
	for _, t := range internal {
		l.internal[t] = true
	}
	if c != nil {
		l.purger = c.DeleteRecords
	}
	return l
}

func (l *lagCommitter) offer(task int, ps []checkpoint.SourcePosition) {
	var in []checkpoint.SourcePosition
	for _, p := range ps {
		if l.internal[p.Topic] {
			in = append(in, checkpoint.SourcePosition{Topic: p.Topic, Partition: p.Partition, Offset: p.Offset})
		}
	}
	l.mu.Lock()
	l.latest[task] = ps
	if len(in) > 0 {
		h := append(l.history[task], in)
		if len(h) > checkpoint.DefaultRetained {
			h = h[len(h)-checkpoint.DefaultRetained:]
		}
		l.history[task] = h
		if len(h) == checkpoint.DefaultRetained {
			l.purge[task] = least(h)
		}
	}
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
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l.purgeNow(cctx)
	if ps := l.take(l.latest); len(ps) > 0 {
		l.report(&l.failed, "lag offsets not committed", "(monitoring only; checkpoints are unaffected)", l.c.CommitOffsets(cctx, ps))
	}
}

// restored forgets task's history: a restored task may have gone back to
// an older checkpoint than those it completed here.
func (l *lagCommitter) restored(task int) {
	l.mu.Lock()
	delete(l.history, task)
	delete(l.purge, task)
	l.mu.Unlock()
}

// least is, per partition, the least position of the completions in h.
func least(h [][]checkpoint.SourcePosition) []checkpoint.SourcePosition {
	var out []checkpoint.SourcePosition
	for _, ps := range h {
		for _, p := range ps {
			i := slices.IndexFunc(out, func(o checkpoint.SourcePosition) bool { return o.Topic == p.Topic && o.Partition == p.Partition })
			switch {
			case i < 0:
				out = append(out, p)
			case p.Offset < out[i].Offset:
				out[i].Offset = p.Offset
			}
		}
	}
	return out
}

// purgeNow deletes what offer found purgeable.
func (l *lagCommitter) purgeNow(ctx context.Context) {
	if purge := l.take(l.purge); len(purge) > 0 && l.purger != nil {
		l.report(&l.purgeErr, "internal topics not purged", "(they keep growing until a later purge succeeds)", l.purger(ctx, purge))
	}
}

// take empties m, returning its positions in task order.
func (l *lagCommitter) take(m map[int][]checkpoint.SourcePosition) []checkpoint.SourcePosition {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ps []checkpoint.SourcePosition
	for _, t := range slices.Sorted(maps.Keys(m)) {
		ps = append(ps, m[t]...)
	}
	clear(m)
	return ps
}

// report logs err, if any: the first time at warn with why, later ones
// at debug (warned says whether it was).
func (l *lagCommitter) report(warned *bool, what, why string, err error) {
	switch {
	case err == nil:
	case !*warned:
		l.log.Warn(what+" "+why, "err", err)
		*warned = true
	default:
		l.log.Debug(what, "err", err)
	}
}

// lagCollector reports, at each scrape, the consumer lag of every input
// partition of the tasks this worker runs: the partition's end offset
// (read_committed: its last stable offset) minus the position of the
// task's last completed checkpoint, as the lag group shows it.
//
// It also reports the records past each partition's last stable offset:
// they wait behind a transaction still open (another producer's), and no
// read_committed reader sees them until it ends. The lag stays 0 while
// they do; a figure that stays up is a transaction that hangs.
type lagCollector struct {
	w       *worker
	ends    func(ctx context.Context, topic string) (stable, end map[int32]int64, err error)
	desc    *prometheus.Desc
	blocked *prometheus.Desc
}

func newLagCollector(w *worker, c *source.Committer) *lagCollector {
	labels := prometheus.Labels{"job": w.cfg.name()}
	return &lagCollector{w: w, ends: c.EndOffsets,
		desc: prometheus.NewDesc("weir_consumer_lag_records",
			"Records of an input partition after the last completed checkpoint of the task that runs it (last stable offset minus the checkpointed position).",
			[]string{"topic", "partition"}, labels),
		blocked: prometheus.NewDesc("weir_consumer_blocked_records",
			"Records of an input partition past its last stable offset: behind a transaction still open, unread until it ends (end offset minus last stable offset).",
			[]string{"topic", "partition"}, labels)}
}

func (l *lagCollector) Describe(ch chan<- *prometheus.Desc) { ch <- l.desc; ch <- l.blocked }

func (l *lagCollector) Collect(ch chan<- prometheus.Metric) {
	positions := l.w.positions()
	if len(positions) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	stables, ends := map[string]map[int32]int64{}, map[string]map[int32]int64{}
	for _, p := range positions {
		if _, ok := stables[p.Topic]; ok {
			continue
		}
		s, e, err := l.ends(ctx, p.Topic)
		if err != nil {
			return // no figure beats a wrong one
		}
		stables[p.Topic], ends[p.Topic] = s, e
	}
	for _, p := range positions {
		stable, ok := stables[p.Topic][p.Partition]
		if !ok {
			continue
		}
		part := strconv.Itoa(int(p.Partition))
		ch <- prometheus.MustNewConstMetric(l.desc, prometheus.GaugeValue, float64(max(0, stable-p.Offset)), p.Topic, part)
		if end, ok := ends[p.Topic][p.Partition]; ok {
			ch <- prometheus.MustNewConstMetric(l.blocked, prometheus.GaugeValue, float64(max(0, end-stable)), p.Topic, part)
		}
	}
}
