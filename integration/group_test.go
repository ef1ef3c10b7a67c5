package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/testcluster"
)

// Log messages of the worker (worker/) that these tests read.
const (
	msgTaskRevoked   = "task revoked"
	msgTaskRestored  = "task restored"
	msgFirstRecord   = "task first record"
	msgAssignment    = "group assignment"
	msgServing       = "serving status page and metrics"
	msgNoValidPrefix = "no valid checkpoint"
)

// groupFlags are the settings of the group tests' workers: short intervals
// and a session timeout the broker allows (group.min.session.timeout.ms is
// 6s by default).
var groupFlags = []string{
	"--interval", "500ms", "--tolerable-failures", "3", "--txn-timeout", "60s", "--pool-size", "9",
	"--session-timeout", "6s", "--heartbeat-interval", "1s", "--rebalance-timeout", "30s", "--handoff-timeout", "10s",
}

// httpAddr waits for p's status address.
func httpAddr(ctx context.Context, t *testing.T, p *proc) string {
	t.Helper()
	_, line, err := p.WaitLine(ctx, 0, isMsg(msgServing, -1))
	if err != nil {
		t.Fatalf("%s serves no status page: %v", p.name, err)
	}
	addr, _ := logAttr(line, "addr")
	return addr
}

// workerStatus is the part of a worker's /status.json these tests read.
type workerStatus struct {
	Ready bool `json:"ready"`
	Tasks []struct {
		Task  int    `json:"task"`
		State string `json:"state"`
	} `json:"tasks"`
	GroupState *struct {
		Members []struct {
			ID    string `json:"id"`
			Tasks []int  `json:"tasks"`
		} `json:"members"`
	} `json:"group_state"`
}

func fetchStatus(ctx context.Context, addr string) (workerStatus, error) {
	var s workerStatus
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/status.json", nil)
	if err != nil {
		return s, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

// running returns, per task, the live workers (by name) whose status page
// shows it running, and whether every worker answered.
func running(ctx context.Context, ws []*proc, addrs map[*proc]string) (map[int][]string, error) {
	out := map[int][]string{}
	for _, p := range ws {
		if p.Exited() {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		s, err := fetchStatus(rctx, addrs[p])
		cancel()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
		for _, ts := range s.Tasks {
			if ts.State == "running" {
				out[ts.Task] = append(out[ts.Task], p.name)
			}
		}
	}
	return out, nil
}

// waitEachTaskOnce polls the live workers' status pages until every task
// 0..n-1 runs on exactly one of them.
func waitEachTaskOnce(ctx context.Context, t *testing.T, ws []*proc, addrs map[*proc]string, n int, within time.Duration) map[int][]string {
	t.Helper()
	deadline := time.Now().Add(within)
	var last map[int][]string
	var lastErr error
	for time.Now().Before(deadline) {
		last, lastErr = running(ctx, ws, addrs)
		if lastErr == nil && eachOnce(last, n) {
			return last
		}
		poll(ctx, t, 500*time.Millisecond)
	}
	t.Fatalf("after %v, tasks do not each run on exactly one live worker: %v (last error %v)", within, last, lastErr)
	return nil
}

func eachOnce(m map[int][]string, n int) bool {
	for task := range n {
		if len(m[task]) != 1 {
			return false
		}
	}
	return len(m) == n
}

// checkValidCheckpoints starts one more worker alone in the group: it must
// restore every task from a checkpoint (none may be left without a valid
// one), and it drains on SIGTERM.
func (j *countJob) checkValidCheckpoints(ctx context.Context) {
	t := j.t
	t.Helper()
	p := j.run("final-check", "", groupFlags...)
	restored := map[int64]bool{}
	for len(restored) < int(j.partitions) {
		_, line, err := p.WaitLine(ctx, 0, func(l string) bool {
			return (logMsg(l) == msgTaskRestored && !restored[logInt(l, "task")]) || strings.Contains(l, msgNoValidPrefix)
		})
		if err != nil {
			t.Fatalf("final check: %v (restored %d of %d tasks)", err, len(restored), j.partitions)
		}
		if strings.Contains(line, msgNoValidPrefix) {
			t.Fatalf("final check: a task has no valid checkpoint: %s", line)
		}
		if logInt(line, "from_checkpoint") <= 0 {
			t.Errorf("final check: task %d started without a checkpoint: %s", logInt(line, "task"), line)
		}
		restored[logInt(line, "task")] = true
	}
	if err, graceful := p.Terminate(time.Minute); err != nil || !graceful {
		t.Errorf("final check worker on SIGTERM: %v (graceful %v)", err, graceful)
	}
}

// TestTwoWorkersOnTheSameTasks is the wedge of issue 11 as a regression
// test: two workers of a job started at once on the same tasks, then a
// third, while input arrives. Without the group (static --tasks) the newest
// owner wins and the others stop, saying so; with the group the three
// share the tasks. Either way the output is exactly once and every task
// ends with a valid checkpoint.
func TestTwoWorkersOnTheSameTasks(t *testing.T) {
	for _, mode := range []string{"static", "group"} {
		t.Run(mode, func(t *testing.T) {
			c := testcluster.Kafka(t)
			ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
			defer cancel()
			const partitions = 4
			j := newCountJob(t, c, partitions)
			out := startOutputReader(t, c, j.output, partitions)
			gen := startGenerator(t, c, j.input, 100, -1, 2000)
			tasks := ""
			if mode == "static" {
				tasks = taskList(partitions)
			}
			a := j.run("A", tasks, groupFlags...)
			b := j.run("B", tasks, groupFlags...)
			// Both run for a while, then a third worker joins.
			if err := out.WaitFor(ctx, func(n, _ int) bool { return n >= 4000 }); err != nil {
				t.Fatalf("no output from A and B: %v", err)
			}
			third := j.run("C", tasks, groupFlags...)
			recs, _ := out.Progress()
			if err := out.WaitFor(ctx, func(n, _ int) bool { return n >= recs+4000 }); err != nil {
				t.Fatalf("no output after C started: %v", err)
			}
			total := gen.Stop()
			wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
			err := out.WaitFor(wctx, func(_, distinct int) bool { return int64(distinct) >= total })
			wcancel()
			if err != nil {
				recs, distinct := out.Progress()
				t.Errorf("the output did not cover the input: %v; %d records, %d distinct of %d", err, recs, distinct, total)
			}
			live := 0
			for _, p := range []*proc{a, b, third} {
				if p.Exited() {
					// Only a static worker whose tasks a newer owner took
					// may end by itself, and it must say why.
					superseded := slices.ContainsFunc(p.Lines(), func(l string) bool { return strings.Contains(l, "superseded") })
					if mode != "static" || !superseded {
						t.Errorf("%s ended by itself (%s) in %s mode, superseded %v", p.name, p.state(), mode, superseded)
					}
					continue
				}
				live++
				if err, graceful := p.Terminate(time.Minute); err != nil || !graceful {
					t.Errorf("%s on SIGTERM: %v (graceful %v)", p.name, err, graceful)
				}
			}
			if mode == "static" && live != 1 {
				t.Errorf("static: %d workers still ran the same tasks, want the newest alone", live)
			}
			if mode == "group" && live != 3 {
				t.Errorf("group: %d of 3 workers ran to the end", live)
			}
			j.checkValidCheckpoints(ctx)
			rep := j.finish(ctx, out, total)
			t.Logf("%s: %v", mode, rep)
			assertExactlyOnce(t, rep)
		})
	}
}

// TestZombieManifestWithoutTransactions: a zombie (an owner that lost its
// task) writes a manifest with no transactions after the newer owner's
// checkpoints. It is valid by the transaction rule alone, and restoring it
// would replay output the newer owner committed: the newer owner's
// restart must restore its own checkpoint instead, and the output stays
// exactly once. The zombie's manifest is the one the older owner wrote
// last, under a new id: what its driver writes when its input is idle.
func TestZombieManifestWithoutTransactions(t *testing.T) {
	c := testcluster.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const partitions = 2
	j := newCountJob(t, c, partitions)
	out := startOutputReader(t, c, j.output, partitions)
	st, err := checkpoint.Open(ctx, j.storage)
	if err != nil {
		t.Fatal(err)
	}

	// A runs and checkpoints the first half, then stops (as if paused for
	// good: its last manifests are idle ones, without transactions).
	gen := startGenerator(t, c, j.input, 50, 5000, 0)
	first := gen.Wait(ctx)
	a := j.run("A", taskList(partitions), groupFlags...)
	if err := out.WaitFor(ctx, func(_, d int) bool { return int64(d) >= first }); err != nil {
		t.Fatal(err)
	}
	idle := map[int]checkpoint.Manifest{}
	for task := range partitions {
		_, _, err := a.WaitLine(ctx, len(a.Lines()), isMsg(msgCheckpointComplete, task))
		if err != nil {
			t.Fatal(err)
		}
		ms := j.manifests(ctx, task)
		m := ms[len(ms)-1]
		if len(committablesOf(m)) != 0 {
			// An idle interval still carries the transactions not yet
			// committed; wait for the next checkpoint.
			_, _, err := a.WaitLine(ctx, len(a.Lines()), isMsg(msgCheckpointComplete, task))
			if err != nil {
				t.Fatal(err)
			}
			ms = j.manifests(ctx, task)
			m = ms[len(ms)-1]
		}
		if len(committablesOf(m)) != 0 {
			t.Fatalf("task %d: A's idle checkpoint %d still has transactions", task, m.Checkpoint)
		}
		idle[task] = m
	}
	a.Kill9()

	// B takes over (a newer epoch), processes the second half and commits it.
	gen2 := startGeneratorFrom(t, c, j.input, 50, first, 5000)
	second := gen2.Wait(ctx)
	b := j.run("B", taskList(partitions), groupFlags...)
	if err := out.WaitFor(ctx, func(_, d int) bool { return int64(d) >= second }); err != nil {
		t.Fatal(err)
	}
	if err, graceful := b.Terminate(time.Minute); err != nil || !graceful {
		t.Fatalf("B on SIGTERM: %v (graceful %v)", err, graceful)
	}

	// The zombie writes its idle manifest again under the next free id:
	// epoch A, positions from before B's input, no transactions.
	zombie := map[int]checkpoint.ID{}
	for task, m := range idle {
		ms := j.manifests(ctx, task)
		newest := ms[len(ms)-1]
		if newest.Epoch <= m.Epoch {
			t.Fatalf("task %d: B's newest checkpoint %d has epoch %d, not newer than A's %d", task, newest.Checkpoint, newest.Epoch, m.Epoch)
		}
		m.Checkpoint = newest.Checkpoint + 1
		m.Timestamp = time.Now()
		data, err := checkpoint.EncodeManifest(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.PutIfAbsent(ctx, checkpoint.ManifestName(j.name, task, m.Checkpoint), data); err != nil {
			t.Fatal(err)
		}
		zombie[task] = m.Checkpoint
	}

	// B restarts: it restores its own checkpoints, never the zombie's.
	b2 := j.run("B2", taskList(partitions), groupFlags...)
	for task := range partitions {
		_, line, err := b2.WaitLine(ctx, 0, isMsg(msgTaskRestored, task))
		if err != nil {
			t.Fatal(err)
		}
		if id := checkpoint.ID(logInt(line, "from_checkpoint")); id == zombie[task] {
			t.Errorf("task %d restored the zombie's manifest %d", task, id)
		}
	}
	poll(ctx, t, 2*time.Second) // B2 runs a while: a replay would be written now
	if err, graceful := b2.Terminate(time.Minute); err != nil || !graceful {
		t.Fatalf("B2 on SIGTERM: %v (graceful %v)", err, graceful)
	}
	rep := j.finish(ctx, out, second)
	t.Logf("%v", rep)
	assertExactlyOnce(t, rep)
}

// chaosEvent is a disruption of a worker (kill -9, SIGSTOP past its
// session, SIGTERM) at a moment.
type chaosEvent struct {
	at   time.Time
	kind string
	p    *proc
}

// TestGroupChaos runs 3 worker processes of a job with 12 tasks while a
// generator writes, and at random kills one (-9), starts one, stops one with
// SIGTERM, and pauses one with SIGSTOP past its session timeout before it
// resumes. At the end every task runs on exactly one live worker, and the
// read_committed output is exactly once. Every hand-off's time, from the
// disruption (revoke, kill, pause) to the first record at the new owner,
// is printed. WEIR_CHAOS_DURATION sets the disruption phase (default 2m on
// a real broker, 45s in process).
func TestGroupChaos(t *testing.T) { testGroupChaos(t, testcluster.Kafka(t), nil) }

// testGroupChaos runs the scenario on c, with file:// checkpoints, or with
// Pebble state and checkpoints in b if b is not nil; then it also checks
// that tasks moved through b: some new owner restored a checkpoint, and
// every task's manifests and the shared SSTs are in the bucket.
func testGroupChaos(t *testing.T, c *testcluster.Cluster, b *testcluster.Bucket) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, seed^0xc4a05))
	duration := 2 * time.Minute
	if c.Provider == testcluster.ProviderInProcess {
		duration = 45 * time.Second
	}
	if d := envInt(t, "WEIR_CHAOS_DURATION_S", 0); d > 0 {
		duration = time.Duration(d) * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), duration+8*time.Minute)
	defer cancel()
	const partitions = 12
	j := newCountJob(t, c, partitions)
	flags := groupFlags
	storage := "file:// (" + j.checkpoints + ")"
	if b != nil {
		j.useS3(b)
		flags = slices.Concat(groupFlags, []string{"--state-backend", "pebble"})
		storage = fmt.Sprintf("s3:// (%s at %s, bucket %s, prefix %s)", b.Provider, b.Endpoint, b.Name, b.Prefix)
	}
	t.Logf("checkpoint storage: %s", storage)
	out := startOutputReader(t, c, j.output, partitions)
	gen := startGenerator(t, c, j.input, 1200, -1, 2400)

	var workers []*proc
	addrs := map[*proc]string{}
	next := 0
	start := func() *proc {
		next++
		p := j.run("w"+strconv.Itoa(next), "", flags...)
		workers = append(workers, p)
		addrs[p] = httpAddr(ctx, t, p)
		return p
	}
	live := func() []*proc {
		var ps []*proc
		for _, p := range workers {
			if !p.Exited() {
				ps = append(ps, p)
			}
		}
		return ps
	}
	for range 3 {
		start()
	}
	waitEachTaskOnce(ctx, t, live(), addrs, partitions, time.Minute)

	var events []chaosEvent
	counts := map[string]int{}
	began := time.Now()
	for time.Since(began) < duration {
		poll(ctx, t, time.Duration(3000+rng.IntN(4000))*time.Millisecond)
		ps := live()
		var actions []string
		if len(ps) > 2 {
			actions = append(actions, "kill-9", "sigterm")
		}
		if len(ps) > 1 {
			actions = append(actions, "sigstop")
		}
		if len(ps) < 4 {
			actions = append(actions, "start")
		}
		// Every kind of disruption at least once, then at random.
		var undone []string
		for _, a := range actions {
			if counts[a] == 0 {
				undone = append(undone, a)
			}
		}
		if len(undone) > 0 {
			actions = undone
		}
		action := actions[rng.IntN(len(actions))]
		counts[action]++
		recs, distinct := out.Progress()
		switch action {
		case "start":
			p := start()
			t.Logf("chaos: start %s; output %d records, %d distinct", p.name, recs, distinct)
		case "kill-9":
			p := ps[rng.IntN(len(ps))]
			events = append(events, chaosEvent{time.Now(), action, p})
			p.Kill9()
			t.Logf("chaos: kill -9 %s (pid %d); output %d records, %d distinct", p.name, p.Pid(), recs, distinct)
		case "sigterm":
			p := ps[rng.IntN(len(ps))]
			events = append(events, chaosEvent{time.Now(), action, p})
			err, graceful := p.Terminate(time.Minute)
			t.Logf("chaos: SIGTERM %s (pid %d): %v, graceful %v; output %d records, %d distinct", p.name, p.Pid(), err, graceful, recs, distinct)
			if err != nil || !graceful {
				t.Errorf("%s did not drain on SIGTERM: %v", p.name, err)
			}
		case "sigstop":
			p := ps[rng.IntN(len(ps))]
			pause := 6*time.Second + 3*time.Second // past the session timeout
			events = append(events, chaosEvent{time.Now(), action, p})
			p.Signal(syscall.SIGSTOP)
			t.Logf("chaos: SIGSTOP %s (pid %d) for %v; output %d records, %d distinct", p.name, p.Pid(), pause, recs, distinct)
			poll(ctx, t, pause)
			p.Signal(syscall.SIGCONT)
			t.Logf("chaos: SIGCONT %s", p.name)
		}
	}
	t.Logf("chaos phase: %v, actions %v, seed %d", time.Since(began).Round(time.Second), counts, seed)
	if len(live()) == 0 {
		start()
	}
	final := waitEachTaskOnce(ctx, t, live(), addrs, partitions, 2*time.Minute)
	t.Logf("every task runs on exactly one live worker: %v", final)

	total := gen.Stop()
	wctx, wcancel := context.WithTimeout(ctx, 3*time.Minute)
	err := out.WaitFor(wctx, func(_, distinct int) bool { return int64(distinct) >= total })
	wcancel()
	if err != nil {
		recs, distinct := out.Progress()
		t.Errorf("the output did not cover the input: %v; %d records, %d distinct of %d", err, recs, distinct, total)
	}
	handoffs := measureHandoffs(t, workers, events)
	for _, p := range live() {
		if err, graceful := p.Terminate(time.Minute); err != nil || !graceful {
			t.Errorf("%s on SIGTERM: %v (graceful %v)", p.name, err, graceful)
		}
	}
	rep := j.finish(ctx, out, total)
	t.Logf("records in %d, out %d, duplicates %d, missing %d; %d workers started, actions %v, %d hand-offs, seed %d",
		rep.In, rep.Out, rep.Duplicates, rep.Missing, len(workers), counts, len(handoffs), seed)
	assertExactlyOnce(t, rep)
	if len(handoffs) == 0 {
		t.Error("no hand-off was measured: the chaos moved no task")
	}
	for _, a := range []string{"kill-9", "sigterm", "sigstop", "start"} {
		if counts[a] == 0 {
			t.Errorf("the chaos phase never did %s (actions %v): make it longer", a, counts)
		}
	}
	if b != nil {
		restores := checkpointRestores(workers)
		t.Logf("%d task restores from a checkpoint in S3", restores)
		if restores == 0 {
			t.Errorf("no task restored from a checkpoint in S3: the hand-offs tested nothing of S3")
		}
		checkS3Checkpoints(ctx, t, b, j)
	}
}

// checkpointRestores counts the tasks the workers restored from a
// checkpoint (taken over from another worker, or after a restart).
func checkpointRestores(workers []*proc) int {
	n := 0
	for _, p := range workers {
		for _, l := range p.Lines() {
			if logMsg(l) == msgTaskRestored && logInt(l, "from_checkpoint") > 0 {
				n++
			}
		}
	}
	return n
}

// handoff is one task moving: from its disruption to the first record the
// new owner processed.
type handoff struct {
	task     int
	kind     string
	from, to string
	took     time.Duration
}

// logTime is the time of a slog text line.
func logTime(line string) time.Time {
	v, _ := logAttr(line, "time")
	ts, _ := time.Parse(time.RFC3339Nano, v)
	return ts
}

// measureHandoffs pairs each task's disruptions (a revoke logged by its
// owner, or a kill, pause or SIGTERM of its owner) with the next first
// record of the task at another worker, prints each and their quantiles per
// kind, and returns them.
func measureHandoffs(t *testing.T, workers []*proc, events []chaosEvent) []handoff {
	t.Helper()
	type ev struct {
		at   time.Time
		kind string // revoke, restored, first, or a chaos kind
		task int
		p    *proc
	}
	var evs []ev
	for _, p := range workers {
		for _, l := range p.Lines() {
			switch logMsg(l) {
			case msgTaskRevoked:
				evs = append(evs, ev{logTime(l), "revoke", int(logInt(l, "task")), p})
			case msgTaskRestored:
				evs = append(evs, ev{logTime(l), "restored", int(logInt(l, "task")), p})
			case msgFirstRecord:
				evs = append(evs, ev{logTime(l), "first", int(logInt(l, "task")), p})
			}
		}
	}
	for _, e := range events {
		evs = append(evs, ev{e.at, e.kind, -1, e.p})
	}
	sort.SliceStable(evs, func(i, k int) bool { return evs[i].at.Before(evs[k].at) })
	owner := map[int]*proc{}
	type open struct {
		at   time.Time
		kind string
		from *proc
	}
	pending := map[int]open{}
	var out []handoff
	for _, e := range evs {
		switch e.kind {
		case "restored":
			owner[e.task] = e.p
		case "revoke":
			if _, ok := pending[e.task]; !ok {
				pending[e.task] = open{e.at, "revoke", e.p}
			}
		case "first":
			if o, ok := pending[e.task]; ok && o.from != e.p {
				out = append(out, handoff{e.task, o.kind, o.from.name, e.p.name, e.at.Sub(o.at)})
				delete(pending, e.task)
			}
		default: // a chaos event: every task its worker owns is disrupted
			for task, p := range owner {
				if p == e.p {
					if _, ok := pending[task]; !ok || e.kind != "sigterm" {
						pending[task] = open{e.at, e.kind, e.p}
					}
				}
			}
		}
	}
	byKind := map[string][]time.Duration{}
	for _, h := range out {
		t.Logf("hand-off: task %2d %-8s %s -> %s in %v", h.task, h.kind, h.from, h.to, h.took.Round(time.Millisecond))
		byKind[h.kind] = append(byKind[h.kind], h.took)
	}
	for kind, ds := range byKind {
		slices.Sort(ds)
		q := func(f float64) time.Duration {
			return ds[min(len(ds)-1, int(f*float64(len(ds))))].Round(time.Millisecond)
		}
		t.Logf("hand-offs after %s: %d, p50 %v, p99 %v, max %v", kind, len(ds), q(0.5), q(0.99), ds[len(ds)-1].Round(time.Millisecond))
	}
	return out
}
