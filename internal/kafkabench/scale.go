package kafkabench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ScaleRun is the count job over one input with k worker processes.
type ScaleRun struct {
	Workers int
	Records int64
	// Elapsed runs from starting the processes until every output record
	// is visible; Settled from the moment every worker reported its share
	// of the tasks restored (the group settled) until then, with Before
	// the output records visible at that moment.
	Elapsed, Settled time.Duration
	Before           int64
}

// PerSecond is the records per second over the whole run.
func (s ScaleRun) PerSecond() float64 { return float64(s.Records) / s.Elapsed.Seconds() }

// SettledPerSecond is the records per second once the group settled.
func (s ScaleRun) SettledPerSecond() float64 {
	return float64(s.Records-s.Before) / s.Settled.Seconds()
}

// Scale loads cfg.Records records into a topic of cfg.Partitions
// partitions, then, for each k in workers, runs the count job on that
// input with k `processor run` processes (the binary bin) joined in one
// consumer group, exactly-once with Pebble state and file:// checkpoints,
// and measures until the job's output is all visible read_committed.
func Scale(ctx context.Context, cfg Config, bin string, workers []int) ([]ScaleRun, error) {
	b, done, err := newBench(cfg)
	if err != nil {
		return nil, err
	}
	defer done()
	cfg = b.cfg
	in := b.topic("scale-in")
	if err := b.create(ctx, in); err != nil {
		return nil, err
	}
	b.log.Info("generating input", "topic", in, "records", cfg.Records, "partitions", cfg.Partitions)
	if _, err := b.generate(ctx, in); err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	var runs []ScaleRun
	for i, k := range workers {
		r, err := b.scaleRun(ctx, bin, in, i, k)
		if err != nil {
			return runs, fmt.Errorf("%d workers: %w", k, err)
		}
		b.log.Info("scale run", "workers", k, "records_per_s", int(r.PerSecond()), "settled_records_per_s", int(r.SettledPerSecond()))
		runs = append(runs, r)
	}
	return runs, nil
}

func (b *bench) scaleRun(ctx context.Context, bin, in string, run, k int) (ScaleRun, error) {
	name := fmt.Sprintf("scale%d-%d-%s", run, k, b.suffix)
	out := b.topic(fmt.Sprintf("scale%d-%d-out", run, k))
	if err := b.create(ctx, out); err != nil {
		return ScaleRun{}, err
	}
	dir := filepath.Join(b.cfg.Dir, name)
	var visible atomic.Int64
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	readDone := make(chan error, 1)
	start := time.Now()
	var procs []*exec.Cmd
	addrs := make([]chan string, k)
	defer func() {
		for _, p := range procs {
			_ = p.Process.Signal(syscall.SIGKILL)
			_ = p.Wait()
		}
	}()
	for i := range k {
		cmd := exec.CommandContext(ctx, bin, "run", "--job", "count", "--name", name,
			"--brokers", strings.Join(b.cfg.Brokers, ","), "--input", in, "--output", out,
			"--checkpoints", "file://"+filepath.Join(dir, "checkpoints"), "--state-dir", filepath.Join(dir, "state"),
			"--interval", b.cfg.Interval.String(), "--http-addr", "127.0.0.1:0", "--log-level", "info")
		stderr, err := cmd.StderrPipe()
		if err != nil {
			return ScaleRun{}, err
		}
		if err := cmd.Start(); err != nil {
			return ScaleRun{}, err
		}
		procs = append(procs, cmd)
		addrs[i] = make(chan string, 1)
		go scanAddr(stderr, addrs[i])
	}
	go func() {
		readDone <- b.readVisible(rctx, out, b.cfg.Records, func(*kgo.Record, time.Time) { visible.Add(1) })
	}()
	// The group has settled once every worker is ready (its tasks
	// restored) with a share of the tasks.
	var urls []string
	for _, ch := range addrs {
		select {
		case a := <-ch:
			urls = append(urls, "http://"+a+"/status.json")
		case <-time.After(time.Minute):
			return ScaleRun{}, errors.New("a worker served no status page within a minute")
		}
	}
	var settledAt time.Time
	var before int64
	for settledAt.IsZero() {
		select {
		case err := <-readDone:
			if err != nil {
				return ScaleRun{}, err
			}
			settledAt, before = time.Now(), visible.Load() // done before it settled
		case <-time.After(100 * time.Millisecond):
		}
		if settledAt.IsZero() && settled(rctx, urls) {
			settledAt, before = time.Now(), visible.Load()
		}
	}
	if before < b.cfg.Records {
		if err := <-readDone; err != nil {
			return ScaleRun{}, err
		}
	}
	end := time.Now()
	for _, p := range procs {
		_ = p.Process.Signal(syscall.SIGTERM)
	}
	return ScaleRun{Workers: k, Records: b.cfg.Records, Elapsed: end.Sub(start), Settled: end.Sub(settledAt), Before: before}, nil
}

// scanAddr sends the worker's status address from its log, then drains it.
func scanAddr(r io.Reader, ch chan<- string) {
	sc := bufio.NewScanner(r)
	sent := false
	for sc.Scan() {
		l := sc.Text()
		if !sent && strings.Contains(l, `msg="serving status page and metrics"`) {
			if i := strings.Index(l, " addr="); i >= 0 {
				a := l[i+len(" addr="):]
				if j := strings.IndexByte(a, ' '); j >= 0 {
					a = a[:j]
				}
				ch <- a
				sent = true
			}
		}
	}
}

// settled reports whether every worker is ready and runs at least one task.
func settled(ctx context.Context, urls []string) bool {
	var mu sync.Mutex
	ok := true
	var wg sync.WaitGroup
	for _, u := range urls {
		wg.Go(func() {
			var s struct {
				Ready    bool  `json:"ready"`
				Assigned []int `json:"assigned"`
			}
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(rctx, http.MethodGet, u, nil)
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				err = json.NewDecoder(resp.Body).Decode(&s)
				resp.Body.Close()
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil || !s.Ready || len(s.Assigned) == 0 {
				ok = false
			}
		})
	}
	wg.Wait()
	return ok
}

// WriteScaleTable prints every run, then per worker count the median (and
// range) of the records/s once the group settled, and its ratio to one
// worker's median.
func WriteScaleTable(w io.Writer, cfg Config, runs []ScaleRun) {
	fmt.Fprintf(w, "weir count job, exactly-once, Pebble state, %v checkpoints: %d records, %d partitions (= tasks), %d keys\n",
		cfg.Interval, cfg.Records, cfg.Partitions, cfg.Keys)
	fmt.Fprintf(w, "%-8s %12s %14s %18s\n", "workers", "seconds", "records/s", "settled records/s")
	by := map[int][]float64{}
	var ks []int
	for _, r := range runs {
		fmt.Fprintf(w, "%-8d %12.2f %14.0f %18.0f\n", r.Workers, r.Elapsed.Seconds(), r.PerSecond(), r.SettledPerSecond())
		if _, ok := by[r.Workers]; !ok {
			ks = append(ks, r.Workers)
		}
		by[r.Workers] = append(by[r.Workers], r.SettledPerSecond())
	}
	slices.Sort(ks)
	median := func(xs []float64) float64 {
		xs = slices.Clone(xs)
		slices.Sort(xs)
		if len(xs)%2 == 1 {
			return xs[len(xs)/2]
		}
		return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
	}
	fmt.Fprintf(w, "\n%-8s %6s %18s %14s %14s %12s\n", "workers", "runs", "median records/s", "min", "max", "vs 1 worker")
	base := median(by[ks[0]])
	for _, k := range ks {
		xs := by[k]
		fmt.Fprintf(w, "%-8d %6d %18.0f %14.0f %14.0f %12.2f\n", k, len(xs), median(xs), slices.Min(xs), slices.Max(xs), median(xs)/base)
	}
}
