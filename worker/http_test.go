package worker

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/worker/internal/status"
)

var discard = slog.New(slog.DiscardHandler)

// newTestWorker returns a worker with static tasks and no Kafka, whose
// metrics are registered in the returned registry: what the HTTP handlers
// read. Its observer feeds it as the runtime would.
func newTestWorker(t *testing.T) (*worker, *observer, *prometheus.Registry) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Job, cfg.Input, cfg.Output, cfg.Tasks = "count", "numbers", "counts", []int{0, 1, 2}
	st := &Stats{}
	w := &worker{cfg: cfg, log: discard, stats: st, tasks: map[int]*status.Task{}, started: time.Now().Add(-90 * time.Second)}
	w.metrics = newMetrics(cfg.name(), st)
	reg := prometheus.NewRegistry()
	if err := w.metrics.register(reg); err != nil {
		t.Fatal(err)
	}
	return w, &observer{w: w, log: discard, metrics: w.metrics, extra: engine.NopObserver{}}, reg
}

// assign marks task t assigned with epoch and restoring, as startTask
// does before it hands the task to the runner.
func assign(w *worker, t int, epoch int64) {
	w.setTask(t, func(s *status.Task) {
		s.State, s.Epoch, s.Since, s.Assigned = status.Restoring, epoch, time.Now(), time.Now()
	})
}

// serve serves w's HTTP endpoints on a free port until the test ends.
func serve(t *testing.T, w *worker, g prometheus.Gatherer) string {
	t.Helper()
	addr, stop, err := serveHTTP(t.Context(), "127.0.0.1:0", false, g, w, discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return addr
}

// get fetches url and returns its status code and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

func manifest(id checkpoint.ID, trigger time.Time, sizes ...int64) checkpoint.Manifest {
	m := checkpoint.Manifest{Checkpoint: id, Timestamp: trigger}
	for _, s := range sizes {
		m.Operators = append(m.Operators, checkpoint.Ack{Operator: "op", State: &checkpoint.StateHandle{Size: s}})
	}
	return m
}

// TestHTTPEndpoints: /healthz answers ok; /readyz answers 503 while a task
// restores and 200 once every task restored; /metrics has the checkpoint,
// record, hand-off and group metrics the observer and the membership feed;
// /status.json has the tasks.
func TestHTTPEndpoints(t *testing.T) {
	w, o, reg := newTestWorker(t)
	addr := serve(t, w, reg)
	url := "http://" + addr

	if code, body := get(t, url+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz: %d %q, want 200 ok", code, body)
	}

	assign(w, 0, 7)
	assign(w, 1, 7)
	if code, body := get(t, url+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "restoring") {
		t.Errorf("/readyz with tasks 0 and 1 restoring: %d %q, want 503 naming a restoring task", code, body)
	}
	o.TaskRestored("count", 0, 7, 0, 5*time.Millisecond)
	if code, body := get(t, url+"/readyz"); code != http.StatusServiceUnavailable || body != "task 1 is restoring\n" {
		t.Errorf("/readyz with task 1 restoring: %d %q, want 503 task 1 is restoring", code, body)
	}
	o.TaskRestored("count", 1, 7, 3, 5*time.Millisecond)
	if code, body := get(t, url+"/readyz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/readyz with every task restored: %d %q, want 200 ok", code, body)
	}

	w.stats.task(1).in.Add(7)
	w.stats.task(1).out.Add(5)
	w.stats.task(1).undecoded.Add(2)
	o.FirstRecord("count", 1, 8*time.Millisecond)
	m := manifest(4, time.Now().Add(-20*time.Millisecond), 100, 23)
	m.Operators = append(m.Operators, checkpoint.Ack{Operator: "output", Committables: []checkpoint.Committable{{TransactionalID: "a"}, {TransactionalID: "b"}}})
	o.CheckpointCompleted("count", 1, m)
	o.LateDropped("count", 1, "windows")
	o.LateDropped("count", 1, "windows")
	// What the membership and stopTask observe; both need Kafka or a runner.
	w.metrics.rebalances.Inc()
	w.metrics.handoffStop.WithLabelValues("true").Observe(0.25)

	code, metrics := get(t, url+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{
		`weir_records_in_total{job="count",task="1"} 7`,
		`weir_records_out_total{job="count",task="1"} 5`,
		`weir_dead_letters_total{job="count",reason="decode",task="1"} 2`,
		`weir_dead_letters_total{job="count",reason="mis_keyed",task="1"} 0`,
		`weir_checkpoint_size_bytes{job="count",task="1"} 123`,
		`weir_checkpoints_completed_total{job="count",task="1"} 1`,
		`weir_checkpoint_last_id{job="count",task="1"} 4`,
		`weir_checkpoint_duration_seconds_count{job="count",task="1"} 1`,
		`weir_pending_transactions{job="count",task="1"} 2`,
		`weir_rebalances_total{job="count"} 1`,
		`weir_late_records_dropped_total{job="count",operator="windows",task="1"} 2`,
		`weir_handoff_restore_seconds_count{job="count"} 2`,
		`weir_handoff_first_record_seconds_count{job="count"} 1`,
		`weir_handoff_stop_seconds_count{drained="true",job="count"} 1`,
	} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(metrics, `weir_records_in_total{job="count",task="2"}`) {
		t.Errorf("/metrics has records of task 2, which never read any")
	}

	_, body := get(t, url+"/status.json")
	var s status.Worker
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatalf("/status.json: %v\n%s", err, body)
	}
	if !s.Ready || len(s.Tasks) != 2 || s.Tasks[1].ID != 1 || s.Tasks[1].RestoredFrom != 3 || len(s.Tasks[1].Checkpoints) != 1 || s.RecordsIn != 7 {
		t.Errorf("/status.json: %+v, want ready, tasks 0 and 1, task 1 restored from 3 with one checkpoint since, 7 records in", s)
	}
}

var taskRowTag = regexp.MustCompile(`<tr class="task" data-task="(\d+)" data-state="([a-z]+)">`)

// tableRow returns the row of page that starts with the tag open, up to
// its </tr>.
func tableRow(t *testing.T, page, open string) string {
	t.Helper()
	i := strings.Index(page, open)
	if i < 0 {
		t.Fatalf("page has no %s", open)
	}
	row, _, ok := strings.Cut(page[i:], "</tr>")
	if !ok {
		t.Fatalf("row %s has no end", open)
	}
	return row
}

// TestStatusPage: the page lists each task in its state, with its last
// checkpoint and a chart of its recent ones; it escapes what it shows and
// loads nothing from elsewhere.
func TestStatusPage(t *testing.T) {
	w, o, reg := newTestWorker(t)
	url := "http://" + serve(t, w, reg) + "/"
	for task := range 3 {
		assign(w, task, 7)
	}
	o.TaskRestored("count", 0, 7, 12, time.Millisecond)
	for i := range 5 {
		o.CheckpointCompleted("count", 0, manifest(checkpoint.ID(13+i), time.Now(), 1000*int64(i+1)))
	}
	o.TaskRestored("count", 2, 7, 0, time.Millisecond)
	o.TaskFailed("count", 2, errors.New(`sink: <script>alert("x")</script>`), false)
	w.setTask(2, func(s *status.Task) { s.State = status.Failed })

	code, page := get(t, url)
	if code != http.StatusOK {
		t.Fatalf("GET /: %d\n%s", code, page)
	}
	states := map[string]string{}
	for _, m := range taskRowTag.FindAllStringSubmatch(page, -1) {
		states[m[1]] = m[2]
	}
	if want := map[string]string{"0": "running", "1": "restoring", "2": "failed"}; !equalMaps(states, want) {
		t.Errorf("task rows %v, want %v", states, want)
	}

	row := tableRow(t, page, `data-task="0"`)
	for _, want := range []string{"checkpoint 12", "#17", "4.9 KiB", "<svg", "<polyline points="} {
		if !strings.Contains(row, want) {
			t.Errorf("task 0's row lacks %q:\n%s", want, row)
		}
	}
	if n := strings.Count(row, "<rect "); n != 5 {
		t.Errorf("task 0's chart has %d bars, want one per checkpoint (5)", n)
	}
	if row := tableRow(t, page, `data-task="1"`); !strings.Contains(row, "none yet") || strings.Contains(row, "<svg") {
		t.Errorf("task 1 (no checkpoint yet) shows one:\n%s", row)
	}
	if !strings.Contains(page, `error: sink: &lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;`) {
		t.Errorf("page lacks task 2's error, escaped")
	}
	if !strings.Contains(page, `not ready: task 1 is restoring`) {
		t.Errorf("page does not say why the worker is not ready")
	}
	for _, external := range []string{"<script", "<link", " src=", "url(", "@import", `href="http`} {
		if strings.Contains(page, external) {
			t.Errorf("page contains %q: it must be self-contained", external)
		}
	}
	if strings.Contains(page, `id="members"`) {
		t.Errorf("a worker with static tasks shows group members")
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

// syncBuffer is a bytes.Buffer for a logger that several goroutines use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServeHTTPFallback: when the default address is taken (a second
// worker on the host), serveHTTP with fallback (what Run passes for the
// default) serves on another port and says so; without it, it fails.
func TestServeHTTPFallback(t *testing.T) {
	// Take the default address, unless something else has it already.
	if ln, err := net.Listen("tcp", DefaultHTTPAddr); err == nil {
		t.Cleanup(func() { ln.Close() })
	} else if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("listen on %s: %v", DefaultHTTPAddr, err)
	}
	t.Run("fallback", func(t *testing.T) {
		w, _, reg := newTestWorker(t)
		var logs syncBuffer
		addr, stop, err := serveHTTP(t.Context(), DefaultHTTPAddr, true, reg, w, slog.New(slog.NewTextHandler(&logs, nil)))
		if err != nil {
			t.Fatalf("with fallback: %v", err)
		}
		defer stop()
		if addr == DefaultHTTPAddr || !strings.HasPrefix(addr, "127.0.0.1:") {
			t.Errorf("serves on %s, want another port of 127.0.0.1", addr)
		}
		if code, body := get(t, "http://"+addr+"/healthz"); code != http.StatusOK || body != "ok\n" {
			t.Errorf("/healthz at %s: %d %q", addr, code, body)
		}
		if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), DefaultHTTPAddr) {
			t.Errorf("no warning naming the taken address; logs:\n%s", logs.String())
		}
	})
	t.Run("no fallback", func(t *testing.T) {
		w, _, reg := newTestWorker(t)
		addr, stop, err := serveHTTP(t.Context(), DefaultHTTPAddr, false, reg, w, discard)
		if err == nil {
			stop()
			t.Fatalf("serves on %s, want an error: the address is taken", addr)
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			t.Errorf("error %v, want EADDRINUSE", err)
		}
	})
}
