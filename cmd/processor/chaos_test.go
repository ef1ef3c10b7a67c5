package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/internal/diskfault"
	"github.com/weirstream/weir/internal/testcluster"
	"github.com/weirstream/weir/worker"
)

// TestMain lets this test binary be the chaos runner's workers: the runner
// starts its own executable with `run ...`, which no test binary is
// otherwise given. Like a weirfaults build, it can make its workers'
// disks fail (statefaults.go).
func TestMain(m *testing.M) {
	stateFaults = func(lookup func(string) (string, bool), log *slog.Logger) vfs.FS {
		return diskfault.FromEnv(stateFaultsEnv, lookup, log)
	}
	if len(os.Args) > 1 && os.Args[1] == "run" {
		worker.TuneGC()
		ctx, drain, stop := worker.Signals()
		code := runDrainable(ctx, drain, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// TestChaosSettings: bad settings fail naming the flag.
func TestChaosSettings(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--workers", "0"}, "--workers"},
		{[]string{"--faults", "sigkill,meteor"}, `unknown fault "meteor"`},
		{[]string{"--session-timeout", "2s"}, "--session-timeout"},
		{[]string{"--brokers", "127.0.0.1:9092", "--faults", "broker-restart"}, "broker-restart needs a broker the runner can restart"},
		{[]string{"--duration", "0s"}, "--duration"},
		{[]string{"--brokers", "127.0.0.1:9092", "--faults", "kafka-cut"}, "kafka-cut needs a broker with a listener per worker"},
	} {
		var stderr bytes.Buffer
		_, err := parseChaos(tc.args, func(string) (string, bool) { return "", false }, &stderr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	c, err := parseChaos([]string{"--brokers", "127.0.0.1:9092", "--faults", "sigkill,sigstop"}, func(string) (string, bool) { return "", false }, &bytes.Buffer{})
	if err != nil || len(c.Faults) != 2 {
		t.Errorf("valid settings: %+v, %v", c, err)
	}
}

// TestChaosVerdict: the report is clean only for exactly-once output, all
// input read back, and a recovery from every fault.
func TestChaosVerdict(t *testing.T) {
	clean := chaosReport{cfg: chaosConfig{Faults: chaosFaults}, produced: 10, verdict: Verdict{In: 10, Out: 10},
		recovered: []recovery{{fault: "sigkill", took: time.Second, done: true}, {fault: "s3-errors", took: 3 * time.Second, done: true}},
		layout:    &layoutStop{took: 20 * time.Second}}
	if !clean.clean() || clean.longest().fault != "s3-errors" {
		t.Fatalf("clean report: clean %v, longest %+v", clean.clean(), clean.longest())
	}
	for name, edit := range map[string]func(*chaosReport){
		"duplicate":     func(r *chaosReport) { r.verdict.Duplicates = 1 },
		"missing":       func(r *chaosReport) { r.verdict.Missing = 1 },
		"wrong sum":     func(r *chaosReport) { r.verdict.WrongTotals = 1 },
		"input lost":    func(r *chaosReport) { r.verdict.In = 9 },
		"not recovered": func(r *chaosReport) { r.recovered = append(r.recovered, recovery{fault: "sigstop"}) },
		"over the bound": func(r *chaosReport) {
			r.cfg.MaxRecovery = 2 * time.Second // s3-errors took 3 s
		},
		"open txn":     func(r *chaosReport) { r.verdict.Notes = []string{"partition 3: a transaction is open"} },
		"worker exit":  func(r *chaosReport) { r.exits = []string{"worker 1: exit status 1"} },
		"crash":        func(r *chaosReport) { r.crashes = []string{"worker 0: WARNING: DATA RACE"} },
		"failed drain": func(r *chaosReport) { r.drains = []string{"worker 2: drain ended with exit status 1"} },
		"layout not stopped": func(r *chaosReport) {
			r.layout = &layoutStop{err: errors.New("w1 did not stop the job (reason partitions_changed) within 45s")}
		},
		"layout not tried": func(r *chaosReport) { r.layout = nil },
	} {
		r := clean
		r.recovered = append([]recovery(nil), clean.recovered...)
		edit(&r)
		var out bytes.Buffer
		r.write(&out)
		if r.clean() || !strings.Contains(out.String(), "NOT CLEAN") {
			t.Errorf("%s: clean %v\n%s", name, r.clean(), out.String())
		}
	}
}

// TestChaosRecoveryByFault: per fault kind, nearest-rank percentiles and
// the recoveries over the bound.
func TestChaosRecoveryByFault(t *testing.T) {
	r := chaosReport{cfg: chaosConfig{Faults: chaosFaults, MaxRecovery: 10 * time.Second}}
	for i := 1; i <= 100; i++ {
		r.recovered = append(r.recovered, recovery{fault: "sigkill", took: time.Duration(i) * 100 * time.Millisecond, done: true})
	}
	r.recovered = append(r.recovered, recovery{fault: "broker-restart", took: 12 * time.Second, done: true},
		recovery{fault: "broker-restart", took: 2 * time.Second, done: true}, recovery{fault: "sigstop"})
	got := r.byFault()
	if s := got["sigkill"]; s.n != 100 || s.p50 != 5*time.Second || s.p99 != 9900*time.Millisecond || s.max != 10*time.Second || s.over != 0 {
		t.Errorf("sigkill: %+v", s)
	}
	if s := got["broker-restart"]; s.n != 2 || s.p50 != 2*time.Second || s.max != 12*time.Second || s.over != 1 {
		t.Errorf("broker-restart: %+v", s)
	}
	if _, ok := got["sigstop"]; ok {
		t.Errorf("a recovery that never ended has figures: %+v", got["sigstop"])
	}
	var out bytes.Buffer
	r.write(&out)
	if !strings.Contains(out.String(), "(1 over the bound)") || r.clean() {
		t.Errorf("a recovery over the bound is not reported:\n%s", out.String())
	}
}

// TestChaosLogs: a failed checkpoint counts once, though the coordinator
// and the task both log its abort; crashes are found.
func TestChaosLogs(t *testing.T) {
	dir := t.TempDir()
	ch := &chaos{dir: dir}
	ch.workers = []*chaosWorker{{ch: ch, i: 0}, {ch: ch, i: 1}}
	logs := []string{
		`time=x level=WARN msg="checkpoint declined" job=j task=5 epoch=7 checkpoint=42 err="upload"` + "\n" +
			`time=x level=WARN msg="checkpoint aborted" job=j task=5 checkpoint=42 err="timed out"` + "\n" +
			`time=x level=WARN msg="checkpoint aborted" job=j task=5 epoch=7 checkpoint=42 err="timed out"` + "\n" +
			`time=x level=WARN msg="checkpoint aborted" job=j task=5 epoch=8 checkpoint=42 err="timed out"` + "\n" +
			`time=x level=WARN msg="task failed, restarting" job=j task=5 err=x` + "\n",
		`time=x level=WARN msg="checkpoint aborted" job=j task=5 epoch=7 checkpoint=42 err="timed out"` + "\n" +
			"WARNING: DATA RACE\n" + "panic: boom\n",
	}
	for i, l := range logs {
		if err := os.WriteFile(ch.workers[i].logPath(), []byte(l), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	failed, restarts, crashes := ch.scanLogs()
	// Worker 0: task 5's checkpoint 42 in epochs 7 and 8; worker 1: its
	// own task 5, epoch 7 (another process's logs are its own).
	if failed != 3 || restarts != 1 || len(crashes) != 2 {
		t.Errorf("failed %d (want 3), restarts %d (want 1), crashes %q (want 2)", failed, restarts, crashes)
	}
}

// TestChaosRun runs the chaos runner briefly on Kafka (kfake unless
// KAFKA_BROKERS names a broker; no broker restarts, which need the
// runner's own broker: .ci/run runs those for three minutes): worker
// processes killed, paused past their session, drained, S3 failing and
// one worker's disk full, and the output still exactly once.
func TestChaosRun(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs worker processes for half a minute")
	}
	c := testcluster.Kafka(t)
	dir := t.TempDir()
	if d := os.Getenv("WEIR_TEST_CHAOS_DIR"); d != "" {
		dir = d // kept, to read the workers' logs
	}
	cfg, err := parseChaos([]string{"--brokers", strings.Join(c.Brokers, ","), "--duration", "25s", "--workers", "2",
		"--partitions", "4", "--rate", "300", "--seed", "11", "--dir", dir, "--catch-up", "90s",
		"--faults", "sigkill,sigstop,sigterm,s3-errors,disk-full"}, func(string) (string, bool) { return "", false }, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	var log bytes.Buffer
	r, err := runChaos(ctx, cfg, &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	var out bytes.Buffer
	r.write(&out)
	t.Logf("\n%s", out.String())
	injected := 0
	for _, n := range r.injected {
		injected += n
	}
	if !r.clean() || injected < 2 || r.verdict.In < 5000 {
		t.Errorf("not clean, or too little happened (%d faults, %d records)\n%s", injected, r.verdict.In, log.String())
		// The logs go with the test's folder: CI keeps only this output.
		for i := range cfg.Workers {
			b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("worker-%d.log", i)))
			if err != nil {
				t.Logf("worker %d's log: %v", i, err)
				continue
			}
			lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
			t.Logf("worker %d's log, the last %d of %d lines:\n%s", i, min(len(lines), 150), len(lines),
				strings.Join(lines[max(0, len(lines)-150):], "\n"))
		}
	}
}
