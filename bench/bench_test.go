package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/internal/testcluster"
)

// TestBench runs the harness small on Kafka (kfake unless KAFKA_BROKERS
// names a broker): the passthrough and weir, one run each, checked and
// tabulated, and short latency runs, weir's at two intervals. The peers
// need Java, Maven and minutes: WEIR_BENCH_PEERS=1 runs them too (flink,
// flink-heap, kstreams and kstreams@100ms), and a short run under a
// producer quota, which needs a real broker (KAFKA_BROKERS) and
// scripts/kafka.
func TestBench(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs processes on Kafka")
	}
	c := testcluster.Kafka(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "processor")
	build := exec.Command("go", "build", "-o", bin, "./cmd/processor")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	systems := "passthrough,weir"
	peers := os.Getenv("WEIR_BENCH_PEERS") == "1"
	if peers {
		systems += ",flink,flink-heap,kstreams,kstreams@100ms"
	}
	sys, err := parseSystems(systems, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cfg := config{brokers: strings.Join(c.Brokers, ","), records: 100_000, partitions: 4, keys: 1000, runs: 1,
		systems: sys, processor: bin, dir: t.TempDir(), latRate: 2000, latFor: 3 * time.Second, latWarmup: time.Second,
		latIntervals: []time.Duration{time.Second, 200 * time.Millisecond}, interval: time.Second,
		restoreMB: 2, restoreSession: 6 * time.Second}
	if peers {
		cfg.latIntervals = cfg.latIntervals[:1] // minutes less
		cfg.quotaBytes, cfg.quotaFor = 50_000, 5*time.Second
		if err := os.Chdir(".."); err != nil { // the peers' and scripts/kafka's paths are the repository's
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chdir("bench") })
	}
	// The passthrough runs as this binary's child: the test binary must
	// answer `passthrough`, which TestMain does.
	rep, err := run(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	wantRests := 1 // weir, and kstreams if the peers run
	if peers {
		wantRests = 2
	}
	if len(rep.restores) != wantRests {
		t.Fatalf("%d restore runs, want %d", len(rep.restores), wantRests)
	}
	for _, r := range rep.restores {
		if r.check != nil || len(r.kept) != cfg.runs || len(r.lost) != cfg.runs || r.disk <= 0 {
			t.Errorf("restore %s: %+v", r.system, r)
		}
	}
	plan := latencyPlan(cfg.systems, cfg.latIntervals, cfg.interval)
	if want := len(cfg.systems) - 1 + len(cfg.latIntervals); !peers && len(plan) != want {
		t.Fatalf("latency plan %v, want %d runs", plan, want)
	}
	if len(rep.latencies) != len(plan) {
		t.Fatalf("%d latency runs for a plan of %d", len(rep.latencies), len(plan))
	}
	for i, l := range rep.latencies {
		if l.system != plan[i] || l.err != nil || l.check != nil || l.samples == 0 || l.p50 <= 0 || l.p99 < l.p50 || l.max < l.p99 {
			t.Errorf("latency %s: %+v", plan[i].name, l)
		}
	}
	if len(rep.results) != len(cfg.systems) {
		t.Fatalf("%d results for %d systems", len(rep.results), len(cfg.systems))
	}
	for _, r := range rep.results {
		if !r.ok() || r.records <= 0 || r.elapsed <= 0 || r.rss <= 0 || r.harnessCPU <= 0 {
			t.Errorf("%s: %+v", r.system.name, r)
		}
	}
	if peers {
		if len(rep.quotas) != len(cfg.systems)-1 {
			t.Fatalf("%d runs under the quota for %d systems but the passthrough", len(rep.quotas), len(cfg.systems)-1)
		}
		for _, q := range rep.quotas {
			if q.err != nil || q.check != nil || q.stats.completed == 0 || q.stats.p99 < q.stats.p50 || q.results <= 0 {
				t.Errorf("under the quota, %s: %+v", q.system.name, q)
			}
		}
	}
	var out bytes.Buffer
	writeRestore(&out, cfg, rep.restores)
	writeQuota(&out, cfg, rep.quotas)
	writeLatency(&out, cfg, rep.latencies)
	writeTable(&out, cfg, rep.results)
	writeCores(&out, cfg, rep.results)
	t.Logf("\n%s", out.String())
	for _, s := range cfg.systems {
		if !strings.Contains(out.String(), "\n"+s.name+" ") || strings.Contains(out.String(), s.name+" no run passed") {
			t.Errorf("table has no figures for %s", s.name)
		}
	}
	for _, l := range plan {
		if !regexp.MustCompile(`\n` + l.kind + ` +` + l.intervalText() + ` +[0-9]`).MatchString(out.String()) {
			t.Errorf("latency table has no row for %s at %s", l.kind, l.intervalText())
		}
	}
	var svg bytes.Buffer
	if err := writeSVG(&svg, cfg, rep.results); err != nil || !strings.HasPrefix(svg.String(), "<svg") || !strings.Contains(svg.String(), ">weir<") {
		t.Errorf("svg: %v\n%s", err, svg.String())
	}
}

func TestMain(m *testing.M) {
	if code, child := childMain(os.Args[1:]); child {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// TestChecker: the check finds what is not exactly once.
func TestChecker(t *testing.T) {
	const keys, records = 3, 10 // key k0: records 0, 3, 6, 9; k1: 1, 4, 7; k2: 2, 5, 8
	rec := func(key string, count, sum int64) *kgo.Record {
		return &kgo.Record{Key: []byte(key), Value: fmt.Appendf(nil, `{"key":%q,"count":%d,"sum":%d}`, key, count, sum)}
	}
	all := func() []*kgo.Record {
		var rs []*kgo.Record
		for j := range int64(keys) {
			s := int64(0)
			for c := int64(1); j+(c-1)*keys < records; c++ {
				s += j + (c-1)*keys
				rs = append(rs, rec(fmt.Sprintf("k%d", j), c, s))
			}
		}
		return rs
	}
	for _, tc := range []struct {
		name string
		edit func([]*kgo.Record) []*kgo.Record
		want string // in the error; "" for none
	}{
		{"exactly once", func(rs []*kgo.Record) []*kgo.Record { return rs }, ""},
		{"duplicate", func(rs []*kgo.Record) []*kgo.Record { return append(rs, rs[2]) }, "1 duplicates"},
		{"missing", func(rs []*kgo.Record) []*kgo.Record { return rs[1:] }, "1 missing"},
		{"wrong sum", func(rs []*kgo.Record) []*kgo.Record { rs[1] = rec("k0", 2, 4); return rs }, "sum 4, want 3"},
		{"record key", func(rs []*kgo.Record) []*kgo.Record { rs[0].Key = []byte("k1"); return rs }, `key "k0"`},
		{"too many", func(rs []*kgo.Record) []*kgo.Record { return append(rs, rec("k1", 4, 22)) }, "count 4 of 3 records"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newChecker(keys)
			for _, r := range tc.edit(all()) {
				c.take(r)
			}
			err := c.verify(records)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("verify: %v, want %q", err, tc.want)
			}
		})
	}
}

// TestRecheck: the check a throughput run makes after its timing reads
// the output again and finds what the check as it read found: a
// duplicate, a missing result, and a read that cannot reach the count the
// run saw.
func TestRecheck(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: needs Kafka")
	}
	c := testcluster.Kafka(t)
	const keys, records = 3, 9
	result := func(j, count int64) *kgo.Record {
		s := count*j + keys*count*(count-1)/2
		key := fmt.Sprintf("k%d", j)
		return &kgo.Record{Key: []byte(key), Value: fmt.Appendf(nil, `{"key":%q,"count":%d,"sum":%d}`, key, count, s)}
	}
	var all []*kgo.Record
	for j := range int64(keys) {
		for count := int64(1); count <= records/keys; count++ {
			all = append(all, result(j, count))
		}
	}
	old := recheckTimeout
	recheckTimeout = 5 * time.Second
	t.Cleanup(func() { recheckTimeout = old })
	b := &bench{c: config{keys: keys, records: records}, brokers: c.Brokers}
	cl := c.Client(t)
	for i, tc := range []struct {
		name  string
		out   []*kgo.Record
		n     int64 // what the run counted
		check string
		err   string
	}{
		{"exactly once", all, records, "", ""},
		{"duplicate", append(slices.Clone(all), all[4]), records + 1, "1 duplicates", ""},
		{"missing", all[1:], records - 1, "1 missing", ""},
		{"fewer than counted", all, records + 2, "", "9 of the 11 results the run counted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topic := fmt.Sprintf("recheck-%d", i)
			c.CreateTopics(t, 1, topic)
			for _, r := range tc.out {
				r := *r
				r.Topic = topic
				if err := cl.ProduceSync(t.Context(), &r).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			check, err := b.recheck(t.Context(), topic, tc.n, false)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("recheck: %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.check == "" && check != nil || tc.check != "" && (check == nil || !strings.Contains(check.Error(), tc.check)) {
				t.Errorf("check: %v, want %q", check, tc.check)
			}
		})
	}
}

// TestParseOut: the fast reader reads what encoding/json reads.
func TestParseOut(t *testing.T) {
	for _, v := range []string{
		`{"key":"k1","count":2,"sum":3}`, `{"key":"k10","count":-2,"sum":-300}`, `{"key":"","count":0,"sum":0}`,
		`{"count":2,"key":"k1","sum":3}`, `{"key":"k\"1","count":2,"sum":3}`, `{"key":"k1", "count":2,"sum":3}`,
	} {
		got, err := parseOut([]byte(v))
		var want out
		werr := json.Unmarshal([]byte(v), &want)
		if got != want || (err == nil) != (werr == nil) {
			t.Errorf("%s: %+v, %v; encoding/json %+v, %v", v, got, err, want, werr)
		}
	}
	for _, bad := range []string{`{"key":"k1","count":x,"sum":3}`, `{"key":"k1","count":2,"sum":3`, `nope`} {
		if o, err := parseOut([]byte(bad)); err == nil {
			t.Errorf("%s: parsed as %+v", bad, o)
		}
	}
}

// TestLastChecker: the restore runs' check finds lost state, duplicates
// and missing results.
func TestLastChecker(t *testing.T) {
	const keys, rounds = 2000, 2 // probes update k0, k2, k4, ...
	all := func() []*kgo.Record {
		var rs []*kgo.Record
		rec := func(k, prev int64) *kgo.Record {
			return &kgo.Record{Key: fmt.Appendf(nil, "k%d", k), Value: fmt.Appendf(nil, "%d", prev)}
		}
		for i := range int64(keys) {
			rs = append(rs, rec(i, -1))
		}
		for r := range int64(rounds) {
			for j := range int64(probes) {
				prev := j * 2
				if r > 0 {
					prev = keys + (r-1)*probes + j
				}
				rs = append(rs, rec(j*2, prev))
			}
		}
		return rs
	}
	for _, tc := range []struct {
		name string
		edit func([]*kgo.Record) []*kgo.Record
		want string
	}{
		{"exactly once", func(rs []*kgo.Record) []*kgo.Record { return rs }, ""},
		{"state lost", func(rs []*kgo.Record) []*kgo.Record { rs[keys+3].Value = []byte("-1"); return rs }, "1 keys' results wrong"},
		{"state rolled back", func(rs []*kgo.Record) []*kgo.Record { rs[keys+probes+3].Value = []byte("6"); return rs }, "1 keys' results wrong"},
		{"duplicate", func(rs []*kgo.Record) []*kgo.Record { return append(rs, rs[keys+5]) }, "1 keys' results wrong"},
		{"missing", func(rs []*kgo.Record) []*kgo.Record { return rs[:len(rs)-1] }, "1 keys' results wrong"},
		{"garbage", func(rs []*kgo.Record) []*kgo.Record { rs[0].Value = []byte("x"); return rs }, `value "x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newLastChecker()
			for _, r := range tc.edit(all()) {
				c.take(r)
			}
			err := c.verify(keys, rounds)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("verify: %v, want %q", err, tc.want)
			}
		})
	}
}
