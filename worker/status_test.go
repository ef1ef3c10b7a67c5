package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/examples/count"
	"github.com/weirstream/weir/internal/testcluster"
	"github.com/weirstream/weir/worker/internal/status"
)

// countWorkers are workers of one count job running in this process, each
// with its own status server.
type countWorkers struct {
	cluster *testcluster.Cluster
	input   string
	addrs   []string
	cancel  context.CancelFunc
	done    []chan error
	stopped bool
}

// startCountWorkers creates an input topic of partitions partitions with
// records count records in it (key k<i%keys>, value i, as `processor
// generate` writes them), and starts n workers of the count job over it,
// which join one group. The workers stop when the test ends; stop stops
// them earlier and checks how they ended.
func startCountWorkers(t *testing.T, n int, partitions int32, records int) *countWorkers {
	t.Helper()
	c := testcluster.Kafka(t)
	in, out := testcluster.UniqueName(t, "in"), testcluster.UniqueName(t, "out")
	c.CreateTopics(t, partitions, in, out)
	ws := &countWorkers{cluster: c, input: in}
	ws.produce(t, 0, records, 60)

	cfg := DefaultConfig()
	cfg.Job, cfg.Name, cfg.Brokers, cfg.Input, cfg.Output = "count", testcluster.UniqueName(t, "count"), c.Brokers, in, out
	cfg.Checkpoints, cfg.StateBackend = "file://"+t.TempDir(), stateBackendMemory
	cfg.Interval = 200 * time.Millisecond
	// The shortest session the brokers allow (group.min.session.timeout.ms
	// is 6s), a heartbeat quick to notice a rebalance.
	cfg.SessionTimeout, cfg.HeartbeatInterval = 6*time.Second, 200*time.Millisecond
	cfg.RebalanceTimeout, cfg.HandoffTimeout = 20*time.Second, 10*time.Second
	cfg.HTTPAddr = "127.0.0.1:0"
	jobs := []Job{NewJob("count", count.Build)}

	logs := &syncBuffer{} // shown if the test fails
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("worker logs:\n%s", logs.String())
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	ws.cancel = cancel
	t.Cleanup(func() { ws.stop(t) })
	addrs := make(chan string, n)
	for i := range n {
		wc := cfg
		wc.StateDir = t.TempDir()
		log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})).With("worker", i)
		done := make(chan error, 1)
		ws.done = append(ws.done, done)
		go func() {
			done <- Run(ctx, wc, jobs, Options{Logger: log, Listening: func(addr string) { addrs <- addr }})
		}()
	}
	deadline := time.After(30 * time.Second)
	for len(ws.addrs) < n {
		select {
		case a := <-addrs:
			ws.addrs = append(ws.addrs, a)
		case <-deadline:
			t.Fatalf("%d of %d workers serve HTTP after 30s", len(ws.addrs), n)
		}
	}
	return ws
}

// produce writes records records numbered from on, over keys keys.
func (ws *countWorkers) produce(t *testing.T, from, records, keys int) {
	t.Helper()
	rs := make([]*kgo.Record, 0, records)
	for i := from; i < from+records; i++ {
		rs = append(rs, &kgo.Record{Topic: ws.input, Key: []byte("k" + strconv.Itoa(i%keys)), Value: []byte(strconv.Itoa(i))})
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := ws.cluster.Client(t).ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", ws.input, err)
	}
}

// stop cancels the workers and checks that each Run returned nil.
func (ws *countWorkers) stop(t *testing.T) {
	t.Helper()
	if ws.stopped {
		return
	}
	ws.stopped = true
	ws.cancel()
	for i, done := range ws.done {
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("worker %d: Run returned %v, want nil after the cancel", i, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("worker %d: Run did not return within 30s of the cancel", i)
		}
	}
}

// statuses fetches every worker's /status.json.
func (ws *countWorkers) statuses(ctx context.Context) ([]status.Worker, error) {
	var out []status.Worker
	for _, addr := range ws.addrs {
		var s status.Worker
		body, err := fetch(ctx, "http://"+addr+"/status.json")
		if err == nil {
			err = json.Unmarshal(body, &s)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", addr, err)
		}
		out = append(out, s)
	}
	return out, nil
}

// waitStatuses polls the workers' /status.json until ok accepts them (nil
// error) and returns them, or fails the test after within with the last
// reason.
func (ws *countWorkers) waitStatuses(t *testing.T, within time.Duration, ok func([]status.Worker) error) []status.Worker {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		ss, err := ws.statuses(ctx)
		if err == nil {
			if err = ok(ss); err == nil {
				return ss
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("after %v: %v", within, err)
		case <-tick.C:
		}
	}
}

// settled reports why the workers' statuses are not yet those of a settled
// group: every worker ready, the group's members exactly the workers
// (by their status address), their assigned tasks a partition of 0..n-1,
// and every task running on exactly one worker.
func settled(ss []status.Worker, addrs []string, n int) error {
	running := map[int][]string{}
	for i, s := range ss {
		if !s.Ready {
			return fmt.Errorf("worker %s is not ready: %s", addrs[i], s.ReadyWhy)
		}
		if s.GroupState == nil {
			return fmt.Errorf("worker %s shows no group: %q", addrs[i], s.GroupErr)
		}
		if err := membersPartition(s.GroupState.Members, addrs, n); err != nil {
			return fmt.Errorf("worker %s: %w", addrs[i], err)
		}
		for _, ts := range s.Tasks {
			if ts.State == status.Running {
				running[ts.ID] = append(running[ts.ID], addrs[i])
			}
		}
	}
	for task := range n {
		if len(running[task]) != 1 {
			return fmt.Errorf("tasks running, by worker: %v; want each of 0..%d on one", running, n-1)
		}
	}
	if len(running) != n {
		return fmt.Errorf("tasks running, by worker: %v; want 0..%d only", running, n-1)
	}
	return nil
}

// membersPartition reports whether members are the workers at addrs and
// their tasks are 0..n-1, each once.
func membersPartition(members []status.Member, addrs []string, n int) error {
	var https, tasks []string
	var all []int
	for _, m := range members {
		https = append(https, m.HTTP)
		tasks = append(tasks, fmt.Sprint(m.Tasks))
		all = append(all, m.Tasks...)
	}
	slices.Sort(https)
	if want := slices.Sorted(slices.Values(addrs)); !slices.Equal(https, want) {
		return fmt.Errorf("group members at %v, want the workers %v", https, want)
	}
	slices.Sort(all)
	want := make([]int, n)
	for t := range want {
		want[t] = t
	}
	if !slices.Equal(all, want) {
		return fmt.Errorf("members' tasks %v, want a partition of 0..%d", tasks, n-1)
	}
	return nil
}

func fetch(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(resp.Body); err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return b.Bytes(), nil
}

var memberRowTag = regexp.MustCompile(`<tr class="member" data-member="([^"]*)" data-http="([^"]*)"( data-self="true")?>`)

// TestStatusPagesOfTwoWorkers runs two workers of a count job over six
// partitions in one group, waits until the group gave each task to one of
// them, and reads their status pages: the task tables show every task
// running on exactly one worker, and each members table lists both
// workers with links to their pages, itself marked.
func TestStatusPagesOfTwoWorkers(t *testing.T) {
	const tasks = 6
	start := time.Now()
	ws := startCountWorkers(t, 2, tasks, 600)
	ss := ws.waitStatuses(t, time.Minute, func(ss []status.Worker) error { return settled(ss, ws.addrs, tasks) })
	t.Logf("the group settled %v after the start", time.Since(start).Round(time.Millisecond))
	for i, s := range ss {
		if err := membersPartition(s.GroupState.Members, ws.addrs, tasks); err != nil {
			t.Errorf("status.json of %s: %v", ws.addrs[i], err)
		}
	}

	running := map[int]int{}
	for _, addr := range ws.addrs {
		body, err := fetch(t.Context(), "http://"+addr+"/")
		if err != nil {
			t.Fatal(err)
		}
		page := string(body)
		if !strings.Contains(page, `id="tasks"`) || !strings.Contains(page, `id="members"`) {
			t.Fatalf("page of %s lacks the tasks or members table:\n%s", addr, page)
		}
		for _, m := range taskRowTag.FindAllStringSubmatch(page, -1) {
			if m[2] == status.Running {
				task, _ := strconv.Atoi(m[1])
				running[task]++
			}
		}
		var https []string
		var self []string
		for _, m := range memberRowTag.FindAllStringSubmatch(page, -1) {
			https = append(https, m[2])
			if m[3] != "" {
				self = append(self, m[2])
			}
			if !strings.Contains(page, `<a href="http://`+m[2]+`/">`) {
				t.Errorf("page of %s does not link to member %s's page", addr, m[2])
			}
		}
		slices.Sort(https)
		if want := slices.Sorted(slices.Values(ws.addrs)); !slices.Equal(https, want) {
			t.Errorf("members table of %s lists %v, want both workers %v", addr, https, want)
		}
		if len(self) != 1 || self[0] != addr {
			t.Errorf("members table of %s marks %v as this worker, want %s", addr, self, addr)
		}
		if !strings.Contains(page, `id="ready" class="pill ok"`) {
			t.Errorf("page of %s does not say it is ready", addr)
		}
	}
	for task := range tasks {
		if running[task] != 1 {
			t.Errorf("task %d shows running on %d pages, want 1 (all: %v)", task, running[task], running)
		}
	}
	if len(running) != tasks {
		t.Errorf("tasks shown running: %v, want 0..%d", running, tasks-1)
	}
	ws.stop(t)
}

// screenshotPath is where TestStatusPageScreenshot writes the screenshot
// with WEIR_UPDATE_SCREENSHOT=1, relative to this package.
var screenshotPath = filepath.Join("..", "docs", "images", "status-page.png")

const screenshotWidth, screenshotHeight = 1280, 900

// TestStatusPageScreenshot renders the status page of a worker of a
// settled two-worker group in headless Chromium and checks the PNG. With
// WEIR_UPDATE_SCREENSHOT=1 it writes docs/images/status-page.png, else a
// temporary file. Without Chromium it skips, unless WEIR_REQUIRE_CHROMIUM=1
// (CI) makes that a failure.
func TestStatusPageScreenshot(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		chromium, err = exec.LookPath("chromium-browser")
	}
	if err != nil {
		if os.Getenv("WEIR_REQUIRE_CHROMIUM") == "1" {
			t.Fatalf("WEIR_REQUIRE_CHROMIUM=1 but neither chromium nor chromium-browser is on PATH: %v", err)
		}
		t.Skipf("no chromium or chromium-browser on PATH to render the status page (WEIR_REQUIRE_CHROMIUM=1 makes this a failure): %v", err)
	}
	out := filepath.Join(t.TempDir(), "status-page.png")
	if os.Getenv("WEIR_UPDATE_SCREENSHOT") == "1" {
		out = screenshotPath
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	const tasks = 6
	ws := startCountWorkers(t, 2, tasks, 600)
	ws.waitStatuses(t, time.Minute, func(ss []status.Worker) error { return settled(ss, ws.addrs, tasks) })
	// Some checkpoints for the charts, with state growing: every record
	// from now on has a new key.
	produced := 600
	ws.waitStatuses(t, time.Minute, func(ss []status.Worker) error {
		ws.produce(t, produced, 150, 1<<30)
		produced += 150
		for _, s := range ss {
			for _, ts := range s.Tasks {
				if ts.State == status.Running && len(ts.Checkpoints) < 12 {
					return fmt.Errorf("task %d has %d checkpoints, want 12", ts.ID, len(ts.Checkpoints))
				}
			}
		}
		return nil
	})

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--user-data-dir="+t.TempDir(),
		fmt.Sprintf("--window-size=%d,%d", screenshotWidth, screenshotHeight), "--screenshot="+out, "http://"+ws.addrs[0]+"/")
	cmd.WaitDelay = 5 * time.Second
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	_ = os.Remove(out)
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", chromium, err, output.String())
	}
	t.Logf("chromium took %v", time.Since(start).Round(time.Millisecond))
	ws.stop(t)

	f, err := os.Open(out)
	if err != nil {
		t.Fatalf("chromium wrote no screenshot: %v\n%s", err, output.String())
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot %s: %v", out, err)
	}
	if b := img.Bounds(); b.Dx() != screenshotWidth || b.Dy() != screenshotHeight {
		t.Errorf("screenshot is %dx%d, want %dx%d", b.Dx(), b.Dy(), screenshotWidth, screenshotHeight)
	}
	t.Logf("screenshot: %s", out)
}
