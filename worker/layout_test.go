package worker

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/examples/count"
	"github.com/weirstream/weir/internal/testcluster"
	"github.com/weirstream/weir/source"
	"github.com/weirstream/weir/worker/internal/status"
)

// layoutCase is one job's topics on a cluster, and its checkpoint storage.
type layoutCase struct {
	c        *testcluster.Cluster
	cfg      Config
	st       checkpoint.Storage
	internal []string
	logs     *syncBuffer
}

func newLayoutCase(t *testing.T, c *testcluster.Cluster, partitions int32) *layoutCase {
	t.Helper()
	lc := &layoutCase{c: c, cfg: DefaultConfig(), st: checkpoint.NewMemory(checkpoint.MemoryOptions{}), logs: &syncBuffer{}}
	lc.cfg.Name, lc.cfg.Input, lc.cfg.Brokers = testcluster.UniqueName(t, "job"), testcluster.UniqueName(t, "in"), c.Brokers
	lc.internal = []string{lc.cfg.Name + "-by-word-repartition"}
	c.CreateTopics(t, partitions, lc.cfg.Input)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", lc.logs.String())
		}
	})
	return lc
}

// guard returns a guard of the job, as a worker starting now makes it.
func (lc *layoutCase) guard(t *testing.T) *layoutGuard {
	t.Helper()
	g, err := newLayoutGuard(&lc.cfg, lc.st, []string{lc.cfg.Input}, lc.internal, nil, slog.New(slog.NewTextHandler(lc.logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.close)
	return g
}

// start starts a guard and returns it and start's error.
func (lc *layoutCase) start(t *testing.T) (*layoutGuard, error) {
	t.Helper()
	g := lc.guard(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	n, err := source.PartitionCount(ctx, lc.cfg.Brokers, []string{lc.cfg.Input})
	if err != nil {
		t.Fatal(err)
	}
	return g, g.start(ctx, int32(n))
}

// produce writes n records to partition 0 of topic.
func (lc *layoutCase) produce(t *testing.T, topic string, n int) {
	t.Helper()
	rs := make([]*kgo.Record, n)
	for i := range rs {
		rs[i] = &kgo.Record{Topic: topic, Value: []byte("old run")}
	}
	cl := lc.c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := cl.ProduceSync(t.Context(), rs...).FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
}

func (lc *layoutCase) record(t *testing.T) checkpoint.Layout {
	t.Helper()
	rec, err := checkpoint.ReadLayout(t.Context(), lc.st, lc.cfg.Name)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// addPartitions adds add partitions to topic, which then has total, and
// waits until the metadata shows them.
func (lc *layoutCase) addPartitions(t *testing.T, topic string, add, total int) {
	t.Helper()
	resp, err := lc.c.Admin(t).CreatePartitions(t.Context(), add, topic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("add %d partitions to %s: %v", add, topic, err)
	}
	waitPartitions(t, lc.c, topic, total)
}

// waitPartitions waits until the metadata shows topic with n partitions.
func waitPartitions(t *testing.T, c *testcluster.Cluster, topic string, total int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		n, err := source.PartitionCount(t.Context(), c.Brokers, []string{topic}) // a new client: no cached metadata
		if err == nil && n == total {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d partitions in the metadata (%v) a minute after the change, want %d", topic, n, err, total)
		}
	}
}

// wantStop checks that err stops the job for reason, naming want.
func wantStop(t *testing.T, err error, reason string, want ...string) {
	t.Helper()
	if err == nil || !stopsJob(err) {
		t.Fatalf("got %v, want an error that stops the job (%s)", err, reason)
	}
	if got := stopReason(err); got != reason {
		t.Errorf("reason %s, want %s: %v", got, reason, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q:\n%v", w, err)
		}
	}
}

// TestLayoutGuardStart: how a worker settles the layout its job runs on,
// with and without the job's layout record.
func TestLayoutGuardStart(t *testing.T) {
	c := testcluster.Kafka(t)

	t.Run("new incarnation records the layout", func(t *testing.T) {
		lc := newLayoutCase(t, c, 4)
		g, err := lc.start(t)
		if err != nil {
			t.Fatal(err)
		}
		rec := lc.record(t)
		if len(rec.Topics) != 2 || rec.Topics[0].Name != lc.cfg.Input || rec.Topics[1].Name != lc.internal[0] {
			t.Fatalf("record %+v, want the input and the internal topic", rec)
		}
		for _, tl := range rec.Topics {
			if tl.Partitions != 4 || tl.ID == "" {
				t.Errorf("recorded %+v, want 4 partitions and a topic id", tl)
			}
		}
		if g.partitions != 4 {
			t.Errorf("the job's partition count %d, want 4", g.partitions)
		}
		// The next start finds the record and the same layout.
		if _, err := lc.start(t); err != nil {
			t.Fatalf("second start: %v", err)
		}
		if err := g.check(t.Context()); err != nil {
			t.Fatalf("check of an unchanged layout: %v", err)
		}
	})

	t.Run("partitions added", func(t *testing.T) {
		lc := newLayoutCase(t, c, 4)
		g, err := lc.start(t)
		if err != nil {
			t.Fatal(err)
		}
		lc.addPartitions(t, lc.cfg.Input, 4, 8)
		want := []string{"topic " + lc.cfg.Input + " has 8 partitions, was 4 (partitions were added)", "processor rescale", "new --name", "layout.json"}
		wantStop(t, g.check(t.Context()), reasonPartitionsChanged, want...)
		_, err = lc.start(t)
		wantStop(t, err, reasonPartitionsChanged, want...)
		if rec := lc.record(t); rec.Topics[0].Partitions != 4 {
			t.Errorf("the record was rewritten: %+v", rec)
		}
	})

	t.Run("input recreated", func(t *testing.T) {
		lc := newLayoutCase(t, c, 2)
		g, err := lc.start(t)
		if err != nil {
			t.Fatal(err)
		}
		old := lc.record(t).Topics[0].ID
		recreate(t, c, lc.cfg.Input, 2)
		wantStop(t, g.check(t.Context()), reasonTopicRecreated, "topic "+lc.cfg.Input+" was deleted and recreated", "was "+old)
	})

	t.Run("internal topic deleted", func(t *testing.T) {
		lc := newLayoutCase(t, c, 2)
		if _, err := lc.start(t); err != nil {
			t.Fatal(err)
		}
		deleteTopic(t, c, lc.internal[0])
		_, err := lc.start(t)
		wantStop(t, err, reasonTopicDeleted, "topic "+lc.internal[0]+" does not exist (it had 2 partitions")
	})

	t.Run("an earlier run's records in an internal topic", func(t *testing.T) {
		lc := newLayoutCase(t, c, 2)
		c.CreateTopics(t, 2, lc.internal[0])
		lc.produce(t, lc.internal[0], 5)
		_, err := lc.start(t)
		wantStop(t, err, reasonInternalTopicInUse, "internal topic "+lc.internal[0]+" holds 5 records",
			"kafka-topics.sh --bootstrap-server "+strings.Join(c.Brokers, ",")+" --delete --topic "+lc.internal[0], "new --name")
		if _, err := checkpoint.ReadLayout(t.Context(), lc.st, lc.cfg.Name); !errors.Is(err, checkpoint.ErrNotFound) {
			t.Errorf("a refused start wrote a layout record: %v", err)
		}
	})

	t.Run("another worker began the incarnation meanwhile", func(t *testing.T) {
		// Worker A started the incarnation: it recorded the layout and its
		// tasks wrote records. Worker B read no record before A wrote it,
		// then finds A's records: they are not an earlier run's.
		lc := newLayoutCase(t, c, 2)
		if _, err := lc.start(t); err != nil {
			t.Fatal(err)
		}
		lc.produce(t, lc.internal[0], 3)
		lc.st = &hideOnce{Storage: lc.st, name: checkpoint.LayoutName(lc.cfg.Name)}
		if _, err := lc.start(t); err != nil {
			t.Fatalf("B refused A's records: %v", err)
		}
		if !lc.st.(*hideOnce).hidden.Load() {
			t.Fatal("the test did not hide the record from B's first read")
		}
	})

	t.Run("checkpoints of an earlier version", func(t *testing.T) {
		// A job that ran before layout records: it has checkpoints, and
		// its internal topic holds its records, which are its own.
		lc := newLayoutCase(t, c, 2)
		c.CreateTopics(t, 2, lc.internal[0])
		lc.produce(t, lc.internal[0], 5)
		if err := lc.st.PutIfAbsent(t.Context(), checkpoint.ManifestName(lc.cfg.Name, 1, 3), []byte("{}")); err != nil {
			t.Fatal(err)
		}
		if _, err := lc.start(t); err != nil {
			t.Fatalf("a job with checkpoints but no record: %v", err)
		}
		if rec := lc.record(t); len(rec.Topics) != 2 {
			t.Errorf("record %+v", rec)
		}
		if !strings.Contains(lc.logs.String(), "no layout record") {
			t.Error("no warning that the layout was recorded late")
		}
	})

	t.Run("partition counts differ", func(t *testing.T) {
		lc := newLayoutCase(t, c, 4)
		c.CreateTopics(t, 2, lc.internal[0])
		_, err := lc.start(t)
		wantStop(t, err, reasonPartitionCounts, lc.cfg.Input+" has 4", lc.internal[0]+" has 2")
	})

	t.Run("a stage added since the record", func(t *testing.T) {
		lc := newLayoutCase(t, c, 3)
		lc.internal = nil
		if _, err := lc.start(t); err != nil {
			t.Fatal(err)
		}
		lc.internal = []string{lc.cfg.Name + "-by-user-repartition"}
		g, err := lc.start(t)
		if err != nil {
			t.Fatalf("start with a new internal topic: %v", err)
		}
		if tl, ok := g.want.Topic(lc.internal[0]); !ok || tl.Partitions != 3 || tl.ID == "" {
			t.Fatalf("the new internal topic is not checked from now on: %+v", g.want)
		}
		if rec := lc.record(t); len(rec.Topics) != 1 {
			t.Errorf("the record was rewritten: %+v", rec)
		}
		// It was created with the job's count; recreating it is noticed.
		recreate(t, c, lc.internal[0], 3)
		wantStop(t, g.check(t.Context()), reasonTopicRecreated, lc.internal[0])
		// Also by a worker that starts later: the topic is recorded.
		_, err = lc.start(t)
		wantStop(t, err, reasonTopicRecreated, lc.internal[0])
	})

	t.Run("internal topics keep their records' timestamps", func(t *testing.T) {
		// Made by weir: CreateTime, whatever the broker's default.
		lc := newLayoutCase(t, c, 2)
		if _, err := lc.start(t); err != nil {
			t.Fatal(err)
		}
		rcs, err := c.Admin(t).DescribeTopicConfigs(t.Context(), lc.internal[0])
		if err != nil {
			t.Fatal(err)
		}
		rc, err := rcs.On(lc.internal[0], nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(rc.Configs, func(c kadm.Config) bool {
			return c.Key == timestampType && c.Value != nil && *c.Value == "CreateTime"
		}) {
			t.Errorf("%s made without %s=CreateTime: %+v", lc.internal[0], timestampType, rc.Configs)
		}
		// Made by hand with LogAppendTime: refused, at a new
		// incarnation's start and at a stage's addition.
		for _, added := range []bool{false, true} {
			lc := newLayoutCase(t, c, 2)
			appendTime := "LogAppendTime"
			resp, err := c.Admin(t).CreateTopics(t.Context(), 2, -1, map[string]*string{timestampType: &appendTime}, lc.internal[0])
			if err == nil {
				err = resp.Error()
			}
			if err != nil {
				t.Fatal(err)
			}
			if added {
				internal := lc.internal
				lc.internal = nil
				if _, err := lc.start(t); err != nil {
					t.Fatal(err)
				}
				lc.internal = internal
			}
			_, err = lc.start(t)
			if err == nil || !strings.Contains(err.Error(), lc.internal[0]) ||
				!strings.Contains(err.Error(), "--entity-name "+lc.internal[0]+" --add-config message.timestamp.type=CreateTime") {
				t.Errorf("added %v: start with %s of LogAppendTime: %v; want it refused, saying how to set it", added, lc.internal[0], err)
			}
		}
	})

	t.Run("a stage added since the record, its topic left with records", func(t *testing.T) {
		// This incarnation began without the stage; its internal topic is
		// left, with records, from an earlier run that had it. Its readers
		// would start at the topic's start: the records would be read as
		// this run's own.
		lc := newLayoutCase(t, c, 2)
		stale := lc.cfg.Name + "-by-user-repartition"
		c.CreateTopics(t, 2, stale)
		lc.produce(t, stale, 5)
		lc.internal = nil
		if _, err := lc.start(t); err != nil {
			t.Fatal(err)
		}
		lc.internal = []string{stale}
		_, err := lc.start(t)
		wantStop(t, err, reasonInternalTopicInUse, "internal topic "+stale+" holds 5 records", "does not list",
			"kafka-topics.sh --bootstrap-server "+strings.Join(c.Brokers, ",")+" --delete --topic "+stale)
		if _, err := checkpoint.ReadAddedTopic(t.Context(), lc.st, lc.cfg.Name, stale); !errors.Is(err, checkpoint.ErrNotFound) {
			t.Errorf("a refused start recorded the topic: %v", err)
		}
	})

	t.Run("a stage added since the record, another worker's tasks writing", func(t *testing.T) {
		// Worker A recorded the added topic and its tasks wrote to it.
		// Worker B did not find A's record at first, then finds the
		// records: A's, not an earlier run's.
		lc := newLayoutCase(t, c, 2)
		lc.internal = nil
		if _, err := lc.start(t); err != nil {
			t.Fatal(err)
		}
		lc.internal = []string{lc.cfg.Name + "-by-user-repartition"}
		if _, err := lc.start(t); err != nil {
			t.Fatal(err)
		}
		lc.produce(t, lc.internal[0], 3)
		lc.st = &hideOnce{Storage: lc.st, name: checkpoint.AddedTopicName(lc.cfg.Name, lc.internal[0])}
		g, err := lc.start(t)
		if err != nil {
			t.Fatalf("B refused A's records: %v", err)
		}
		if !lc.st.(*hideOnce).hidden.Load() {
			t.Fatal("the test did not hide the record from B's first read")
		}
		if _, ok := g.want.Topic(lc.internal[0]); !ok {
			t.Fatalf("B does not check the added topic: %+v", g.want)
		}
	})
}

// hideOnce answers the first Get of name with ErrNotFound: what a worker
// sees that reads just before another writes.
type hideOnce struct {
	checkpoint.Storage
	name   string
	hidden atomic.Bool
}

func (h *hideOnce) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	if name == h.name && h.hidden.CompareAndSwap(false, true) {
		return nil, checkpoint.ErrNotFound
	}
	return h.Storage.Get(ctx, name)
}

func deleteTopic(t *testing.T, c *testcluster.Cluster, topic string) {
	t.Helper()
	resp, err := c.Admin(t).DeleteTopics(t.Context(), topic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("delete topic %s: %v", topic, err)
	}
	// A real broker deletes asynchronously: wait until the metadata has
	// no such topic.
	deadline := time.Now().Add(time.Minute)
	for {
		tds, err := c.Admin(t).ListTopics(t.Context(), topic)
		if err == nil && tds[topic].Err != nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("topic %s still in the metadata a minute after its deletion", topic)
		}
	}
}

// recreate deletes topic and creates it again with partitions.
func recreate(t *testing.T, c *testcluster.Cluster, topic string, partitions int32) {
	t.Helper()
	deleteTopic(t, c, topic)
	deadline := time.Now().Add(time.Minute)
	for {
		res, err := c.Admin(t).CreateTopic(t.Context(), partitions, -1, nil, topic)
		if err == nil {
			err = res.Err
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("recreate topic %s: %v", topic, err)
		}
	}
	for {
		tds, err := c.Admin(t).ListTopics(t.Context(), topic)
		if err == nil && tds[topic].Err == nil && len(tds[topic].Partitions) == int(partitions) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("recreated topic %s not in the metadata within a minute", topic)
		}
	}
}

// TestJobStopped: a stopped job shows on /readyz (503, the error), in
// weir_job_stopped with its reason, on the status page and in
// status.json; it is logged once at ERROR; no task starts after it.
func TestJobStopped(t *testing.T) {
	w, _, reg := newTestWorker(t)
	logs := &syncBuffer{}
	w.log = slog.New(slog.NewTextHandler(logs, nil))
	addr := serve(t, w, reg)
	url := "http://" + addr
	if code, _ := get(t, url+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz before the stop: %d", code)
	}
	le := &checkpoint.LayoutError{Against: "the job's layout record count/layout.json", Advice: layoutAdviceTopicsChanged,
		Changes: []checkpoint.LayoutChange{{Was: checkpoint.TopicLayout{Name: "numbers", ID: "x", Partitions: 4}, Now: checkpoint.TopicLayout{Name: "numbers", ID: "x", Partitions: 8}}}}
	w.stopJob(le)
	w.stopJob(errors.New("a second cause")) // the first one stands
	code, body := get(t, url+"/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "job stopped on this worker: the topics' layout differs") ||
		!strings.Contains(body, "topic numbers has 8 partitions, was 4") {
		t.Errorf("/readyz: %d %q, want 503 with the error", code, body)
	}
	_, metrics := get(t, url+"/metrics")
	for _, want := range []string{`weir_job_stopped{job="count",reason="partitions_changed"} 1`, `weir_job_stopped{job="count",reason="topic_recreated"} 0`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	_, page := get(t, url+"/")
	if !strings.Contains(page, `<section id="stopped" class="stopped" data-reason="partitions_changed">`) || !strings.Contains(page, "topic numbers has 8 partitions, was 4") {
		t.Errorf("the status page does not show the stop:\n%s", page)
	}
	_, js := get(t, url+"/status.json")
	var st status.Worker
	if err := json.Unmarshal([]byte(js), &st); err != nil {
		t.Fatal(err)
	}
	if st.Ready || st.StoppedReason != reasonPartitionsChanged || !strings.Contains(st.Stopped, "8 partitions") {
		t.Errorf("status.json: ready %v, stopped %q (%s)", st.Ready, st.Stopped, st.StoppedReason)
	}
	if n := strings.Count(logs.String(), "level=ERROR"); n != 1 {
		t.Errorf("%d ERROR lines, want 1:\n%s", n, logs.String())
	}
	w.startTask(0, 3) // the runner is nil: a start would panic
	if s := w.taskSnapshot(); len(s) != 0 {
		t.Errorf("a task started after the stop: %+v", s)
	}
}

// stopSignal is a log handler that closes stopped when the worker logs
// that its job stopped, and keeps every line.
type stopSignal struct {
	slog.Handler
	stopped chan struct{}
	once    *sync.Once
}

func newStopSignal(logs *syncBuffer) stopSignal {
	return stopSignal{Handler: slog.NewTextHandler(logs, nil), stopped: make(chan struct{}), once: &sync.Once{}}
}

func (s stopSignal) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelError && strings.HasPrefix(r.Message, "job stopped on this worker") {
		s.once.Do(func() { close(s.stopped) })
	}
	return s.Handler.Handle(ctx, r)
}

func (s stopSignal) WithAttrs(as []slog.Attr) slog.Handler {
	return stopSignal{Handler: s.Handler.WithAttrs(as), stopped: s.stopped, once: s.once}
}

func (s stopSignal) WithGroup(g string) slog.Handler {
	return stopSignal{Handler: s.Handler.WithGroup(g), stopped: s.stopped, once: s.once}
}

// layoutRun is one Run of a worker of the count job in a test.
type layoutRun struct {
	obs   *faultObserver
	sig   stopSignal
	logs  *syncBuffer
	drain chan struct{}
	done  chan error
	addr  chan string
}

func startLayoutRun(t *testing.T, cfg Config) *layoutRun {
	t.Helper()
	r := &layoutRun{obs: newFaultObserver(), logs: &syncBuffer{}, drain: make(chan struct{}), done: make(chan error, 1), addr: make(chan string, 1)}
	r.sig = newStopSignal(r.logs)
	opts := Options{Logger: slog.New(r.sig), Observer: r.obs, Drain: r.drain, Listening: func(a string) { r.addr <- a }}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		r.done <- Run(ctx, cfg, []Job{NewJob("count", count.Build)}, opts)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			t.Errorf("worker did not stop within 30s of the cancel")
		}
		if t.Failed() {
			t.Logf("worker logs:\n%s", r.logs.String())
		}
	})
	return r
}

// stopped waits for the job's stop and returns /readyz's answer.
func (r *layoutRun) stopped(t *testing.T, within time.Duration) (int, string) {
	t.Helper()
	var addr string
	select {
	case addr = <-r.addr:
	case err := <-r.done:
		t.Fatalf("the worker ended before it served HTTP: %v", err)
	case <-time.After(within):
		t.Fatal("the worker does not serve HTTP")
	}
	select {
	case <-r.sig.stopped:
	case err := <-r.done:
		r.done <- err
		t.Fatalf("the worker ended instead of stopping its job: %v", err)
	case <-time.After(within):
		t.Fatalf("the job did not stop within %v", within)
	}
	return get(t, "http://"+addr+"/readyz")
}

// drained drains the worker and returns Run's error.
func (r *layoutRun) drained(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err
		t.Fatalf("the worker ended before the drain: %v", err)
	default:
	}
	close(r.drain)
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not end within 30s of the drain")
		return nil
	}
}

// TestWorkerStopsOnLayoutChange: a worker whose input gains a partition
// while it runs stops its job within --layout-check-interval (readyz 503
// naming the topic and counts, an ERROR line), stays up until SIGTERM
// (the drain), then returns the error; a restarted worker refuses at once,
// with the same message.
func TestWorkerStopsOnLayoutChange(t *testing.T) {
	j := newFaultJob(t)
	cfg := j.config(t)
	cfg.HTTPAddr, cfg.LayoutCheckInterval = "127.0.0.1:0", 200*time.Millisecond
	r := startLayoutRun(t, cfg)
	j.obs = r.obs
	j.produce(t, 50)
	j.waitCovered(t, 30*time.Second)

	resp, err := j.cluster.Admin(t).CreatePartitions(t.Context(), 1, j.in)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	want := "topic " + j.in + " has 2 partitions, was 1 (partitions were added)"
	code, body := r.stopped(t, 30*time.Second)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, want) {
		t.Fatalf("/readyz: %d %q, want 503 naming the change", code, body)
	}
	err = r.drained(t)
	if !errors.Is(err, checkpoint.ErrLayoutChanged) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Run: %v, want the layout change", err)
	}
	if n := strings.Count(r.logs.String(), "level=ERROR msg=\"job stopped"); n != 1 {
		t.Errorf("%d ERROR lines of the stop, want 1", n)
	}

	r2 := startLayoutRun(t, cfg)
	code, body2 := r2.stopped(t, 30*time.Second)
	if code != http.StatusServiceUnavailable || !strings.Contains(body2, want) {
		t.Fatalf("restarted: /readyz %d %q, want 503 naming the change", code, body2)
	}
	if err := r2.drained(t); !errors.Is(err, checkpoint.ErrLayoutChanged) {
		t.Fatalf("restarted: Run: %v", err)
	}
	if n := r2.obs.restores(); n != 0 {
		t.Errorf("the restarted worker restored %d tasks", n)
	}
}

// TestTaskRefusesChangedLayoutAtRestore: what the job's layout record
// cannot tell (it was lost, or written after the change) the task's
// checkpoint does: a recreated input fails the task's restore for good,
// and the worker stops the job as when its record differs.
func TestTaskRefusesChangedLayoutAtRestore(t *testing.T) {
	j := newFaultJob(t)
	cfg := j.config(t)
	cfg.HTTPAddr = "127.0.0.1:0"
	r := startLayoutRun(t, cfg)
	j.obs = r.obs
	j.produce(t, 20)
	j.waitCovered(t, 30*time.Second)
	if err := r.drained(t); err != nil {
		t.Fatal(err)
	}

	recreate(t, j.cluster, j.in, 1)
	j.produced = 0
	j.produce(t, 40)
	root := strings.TrimPrefix(cfg.Checkpoints, "file://")
	if err := os.Remove(filepath.Join(root, checkpoint.LayoutName(cfg.Name))); err != nil {
		t.Fatal(err)
	}
	r2 := startLayoutRun(t, cfg)
	code, body := r2.stopped(t, 30*time.Second)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "the checkpoint of task 0") ||
		!strings.Contains(body, "topic "+j.in+" was deleted and recreated") {
		t.Fatalf("/readyz: %d %q, want 503 naming the recreated topic", code, body)
	}
	err := r2.drained(t)
	if !errors.Is(err, checkpoint.ErrLayoutChanged) {
		t.Fatalf("Run: %v", err)
	}
	failures := r2.obs.failures()
	if len(failures) != 1 {
		t.Errorf("task failed %d times, want once (no restart): %v", len(failures), failures)
	}
	if got := r2.obs.restores(); got != 0 {
		t.Errorf("the task restored %d times on the recreated topic", got)
	}
}

// restores is how many attempts restored; failures, the task failures.
func (o *faultObserver) restores() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.restored)
}

func (o *faultObserver) failures() []error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]error(nil), o.failed...)
}
