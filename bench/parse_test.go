package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestParseSystems: --systems takes kinds, each optionally @INTERVAL,
// and refuses what cannot run.
func TestParseSystems(t *testing.T) {
	for _, tc := range []struct {
		list string
		want []string // name/interval of each
		err  string   // in the error; "" for none
	}{
		{"passthrough,weir,flink,flink-heap,kstreams", []string{"passthrough/-", "weir/1s", "flink/1s", "flink-heap/1s", "kstreams/1s"}, ""},
		{"kstreams,kstreams@100ms", []string{"kstreams/1s", "kstreams@100ms/100ms"}, ""},
		{" weir@0.05s , flink@2s", []string{"weir@50ms/50ms", "flink@2s/2s"}, ""},
		{"passthrough@1s", nil, "no interval"},
		{"spark", nil, "unknown system"},
		{"weir,", nil, "unknown system"},
		{"weir@fast", nil, "at least 1ms"},
		{"weir@500us", nil, "at least 1ms"},
		{"kstreams,kstreams@1s", nil, "same interval"},
		{"weir@100ms,weir@0.1s", nil, "same interval"},
		{"passthrough,passthrough", nil, "same interval"},
		{"weir,weir-b,weir@100ms,weir-b@100ms", []string{"weir/1s", "weir-b/1s", "weir@100ms/100ms", "weir-b@100ms/100ms"}, ""},
		{"weir-b,weir-b@1s", nil, "same interval"},
	} {
		t.Run(tc.list, func(t *testing.T) {
			got, err := parseSystems(tc.list, time.Second)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, %v; want an error with %q", got, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, s := range got {
				names = append(names, s.name+"/"+s.intervalText())
				if strings.ContainsAny(s.slug(), "@ ") {
					t.Errorf("slug %q of %s: not a topic name", s.slug(), s.name)
				}
			}
			if !slices.Equal(names, tc.want) {
				t.Errorf("got %v, want %v", names, tc.want)
			}
		})
	}
}

// TestLatencyPlan: every system at every interval, the passthrough once,
// a system@interval at its own only, nothing twice.
func TestLatencyPlan(t *testing.T) {
	sys, err := parseSystems("passthrough,weir,kstreams,kstreams@100ms,flink@2s", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range latencyPlan(sys, []time.Duration{time.Second, 100 * time.Millisecond, 50 * time.Millisecond}, time.Second) {
		got = append(got, s.kind+"/"+s.intervalText())
	}
	want := []string{"passthrough/-", "weir/1s", "weir/100ms", "weir/50ms", "kstreams/1s", "kstreams/100ms", "kstreams/50ms", "flink/2s"}
	if !slices.Equal(got, want) {
		t.Errorf("plan %v, want %v", got, want)
	}
	got = nil
	for _, s := range latencyPlan(sys[:2], nil, 250*time.Millisecond) {
		got = append(got, s.kind+"/"+s.intervalText())
	}
	if want := []string{"passthrough/-", "weir/250ms"}; !slices.Equal(got, want) {
		t.Errorf("plan without intervals %v, want %v", got, want)
	}
}

func TestParseIntervals(t *testing.T) {
	got, err := parseIntervals("1s, 100ms,50ms,100ms")
	if want := []time.Duration{time.Second, 100 * time.Millisecond, 50 * time.Millisecond}; err != nil || !slices.Equal(got, want) {
		t.Errorf("got %v, %v; want %v", got, err, want)
	}
	if got, err := parseIntervals(""); err != nil || len(got) != 0 {
		t.Errorf("empty: %v, %v", got, err)
	}
	for _, bad := range []string{"1", "0s", "fast"} {
		if got, err := parseIntervals(bad); err == nil {
			t.Errorf("%q: %v, want an error", bad, got)
		}
	}
}

func TestPercentiles(t *testing.T) {
	var ds []time.Duration
	for i := 200; i >= 1; i-- { // unsorted
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	p50, p99, most := percentiles(ds)
	if p50 != 101*time.Millisecond || p99 != 199*time.Millisecond || most != 200*time.Millisecond {
		t.Errorf("p50 %v p99 %v max %v, want 101ms 199ms 200ms", p50, p99, most)
	}
	if p50, p99, most := percentiles(nil); p50 != 0 || p99 != 0 || most != 0 {
		t.Errorf("none: %v %v %v", p50, p99, most)
	}
}

// TestMetrics: the text format's samples, labels with escapes, and a
// histogram summed over its tasks, with its quantiles as Prometheus'
// histogram_quantile estimates them.
func TestMetrics(t *testing.T) {
	const text = `# HELP weir_checkpoints_aborted_total Aborted (failed or timed out) checkpoints.
# TYPE weir_checkpoints_aborted_total counter
weir_checkpoints_aborted_total{job="count",task="0"} 2
weir_checkpoints_aborted_total{job="co\"u,n}t",task="1"} 3
weir_checkpoint_duration_seconds_bucket{job="count",task="0",le="0.01"} 10
weir_checkpoint_duration_seconds_bucket{job="count",task="0",le="0.02"} 30
weir_checkpoint_duration_seconds_bucket{job="count",task="0",le="0.04"} 40
weir_checkpoint_duration_seconds_bucket{job="count",task="0",le="+Inf"} 40
weir_checkpoint_duration_seconds_bucket{job="count",task="1",le="0.01"} 10
weir_checkpoint_duration_seconds_bucket{job="count",task="1",le="0.02"} 30
weir_checkpoint_duration_seconds_bucket{job="count",task="1",le="0.04"} 58
weir_checkpoint_duration_seconds_bucket{job="count",task="1",le="+Inf"} 60
weir_checkpoint_duration_seconds_sum{job="count",task="1"} 1.5
weir_up 1 1700000000000
`
	ms, err := parseMetrics(text)
	if err != nil {
		t.Fatal(err)
	}
	if got := sumOf(ms, "weir_checkpoints_aborted_total"); got != 5 {
		t.Errorf("aborted %v, want 5", got)
	}
	if ms[1].labels["job"] != `co"u,n}t` || ms[1].labels["task"] != "1" {
		t.Errorf("labels %v", ms[1].labels)
	}
	if got := sumOf(ms, "weir_up"); got != 1 {
		t.Errorf("weir_up %v", got)
	}
	bs := buckets(ms, "weir_checkpoint_duration_seconds")
	if want := []bucket{{0.01, 20}, {0.02, 60}, {0.04, 98}, {math.Inf(1), 100}}; !slices.Equal(bs, want) {
		t.Fatalf("buckets %v, want %v", bs, want)
	}
	for _, tc := range []struct{ q, want float64 }{
		{0.1, 0.005},  // rank 10 of the first bucket's 20, from 0
		{0.5, 0.0175}, // rank 50: 30 of the second's 40, 0.01 + 0.01·30/40
		{0.6, 0.02},   // the second's upper bound
		{0.79, 0.03},  // rank 79: 19 of the third's 38
		{0.99, 0.04},  // in +Inf: the last finite bound
	} {
		if got := bucketQuantile(tc.q, bs); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("quantile %v: %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := bucketQuantile(0.5, []bucket{{0.01, 0}, {math.Inf(1), 0}}); !math.IsNaN(got) {
		t.Errorf("no observations: %v, want NaN", got)
	}
	for _, bad := range []string{`x{a="1} 2`, `x{a=1} 2`, `x`, `x{a="1"} two`} {
		if ms, err := parseMetrics(bad); err == nil {
			t.Errorf("%s: parsed as %+v", bad, ms)
		}
	}
}

func TestParseWeirLog(t *testing.T) {
	const log = `time=2026-12-04T18:00:00.000Z level=INFO msg="serving status page and metrics" addr=127.0.0.1:41234 status=http://127.0.0.1:41234/
time=2026-12-04T18:00:01.000Z level=INFO msg="checkpoint complete" job=count task=0 checkpoint=1 duration=12.5ms
time=2026-12-04T18:00:01.000Z level=INFO msg="checkpoint completed" task=0 checkpoint=1 duration=13ms size=10 positions=x
time=2026-12-04T18:00:02.000Z level=INFO msg="checkpoint complete" job=count task=1 checkpoint=1 duration=1.25s
time=2026-12-04T18:00:02.000Z level=WARN msg="checkpoint aborted" job=count task=1 checkpoint=2 err="timed out"
`
	addr, ds := parseWeirLog(log)
	if addr != "127.0.0.1:41234" || !slices.Equal(ds, []time.Duration{12500 * time.Microsecond, 1250 * time.Millisecond}) {
		t.Errorf("addr %q durations %v", addr, ds)
	}
}

func TestParseFlinkCheckpoints(t *testing.T) {
	const all = `{"counts":{"restored":0,"total":4,"in_progress":0,"completed":3,"failed":1},
"summary":{"end_to_end_duration":{"min":10,"max":90,"avg":40,"p50":20.5,"p90":80,"p95":85,"p99":89.5,"p999":90}},
"history":[{"id":4,"status":"FAILED","end_to_end_duration":5000},{"id":3,"status":"COMPLETED","end_to_end_duration":90},
{"id":2,"status":"COMPLETED","end_to_end_duration":20},{"id":1,"status":"COMPLETED","end_to_end_duration":10}]}`
	st, err := parseFlinkCheckpoints(all)
	if err != nil || st.completed != 3 || st.failed != 1 || st.untriggered != 0 || st.p50 != 20*time.Millisecond || st.p99 != 90*time.Millisecond ||
		!strings.HasPrefix(st.source, "each") {
		t.Errorf("all in the history: %+v, %v", st, err)
	}
	// One more failed, one that never triggered: not in the history.
	st, err = parseFlinkCheckpoints(strings.Replace(strings.Replace(all, `"total":4`, `"total":5`, 1), `"failed":1`, `"failed":2`, 1))
	if err != nil || st.completed != 3 || st.failed != 1 || st.untriggered != 1 {
		t.Errorf("an untriggered one: %+v, %v", st, err)
	}
	// A history short of some completed checkpoints: Flink's summary.
	short := strings.Replace(all, `"completed":3`, `"completed":30`, 1)
	st, err = parseFlinkCheckpoints(short)
	if err != nil || st.completed != 30 || st.failed != 1 || st.untriggered != 0 || st.p50 != 20500*time.Microsecond || st.p99 != 89500*time.Microsecond || st.max != 90*time.Millisecond ||
		!strings.Contains(st.source, "summary") {
		t.Errorf("short history: %+v, %v", st, err)
	}
	if _, err := parseFlinkCheckpoints(`<html>`); err == nil {
		t.Error("not JSON: no error")
	}
}

func TestParseKstreamsCommits(t *testing.T) {
	log := "[main] INFO something\n" + kstreamsPrefix + "completed=1 failed=0 durations_us=7\n" +
		kstreamsPrefix + "completed=3 failed=2 durations_us=3000,1000,2000\n[Thread] INFO closing\n"
	st, err := parseKstreamsCommits(log)
	if err != nil || st.completed != 3 || st.failed != 2 || st.p50 != 2*time.Millisecond || st.max != 3*time.Millisecond {
		t.Errorf("%+v, %v", st, err)
	}
	if st, err := parseKstreamsCommits(kstreamsPrefix + "completed=0 failed=0 durations_us=\n"); err != nil || st.completed != 0 {
		t.Errorf("none: %+v, %v", st, err)
	}
	for _, bad := range []string{"no line\n", kstreamsPrefix + "completed=2 failed=0 durations_us=1\n", kstreamsPrefix + "completed=1 failed=x durations_us=1\n"} {
		if st, err := parseKstreamsCommits(bad); err == nil {
			t.Errorf("%q: %+v", bad, st)
		}
	}
}

// TestVerifySoFar: a run stopped early passes with each key's counts a
// prefix, and fails with a gap or a duplicate.
func TestVerifySoFar(t *testing.T) {
	const keys = 2
	rec := func(j, c int64) *kgo.Record { // key kj's c-th result
		sum := c*j + keys*c*(c-1)/2
		return &kgo.Record{Key: fmt.Appendf(nil, "k%d", j), Value: fmt.Appendf(nil, `{"key":"k%d","count":%d,"sum":%d}`, j, c, sum)}
	}
	for _, tc := range []struct {
		name string
		recs []*kgo.Record
		want string
	}{
		{"prefixes", []*kgo.Record{rec(0, 1), rec(0, 2), rec(0, 3), rec(1, 1)}, ""},
		{"gap", []*kgo.Record{rec(0, 1), rec(0, 3), rec(1, 1)}, "1 missing"},
		{"duplicate", []*kgo.Record{rec(0, 1), rec(0, 2), rec(0, 2)}, "1 duplicates"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newChecker(keys)
			for _, r := range tc.recs {
				c.take(r)
			}
			err := c.verifySoFar()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("verifySoFar: %v, want %q", err, tc.want)
			}
		})
	}
}

// TestTxnCostArgs: bench txncost refuses what it cannot measure, naming
// the flag.
func TestTxnCostArgs(t *testing.T) {
	self := os.Getpid()
	for _, tc := range []struct {
		brokers   string
		pid, n    int
		every, fr time.Duration
		err       string // in the error; "" for none
	}{
		{"127.0.0.1:9092", self, 64, time.Second, 20 * time.Second, ""},
		{"", self, 64, time.Second, 20 * time.Second, "--brokers"},
		{"b:9092", 0, 64, time.Second, 20 * time.Second, "--broker-pid"},
		{"b:9092", 1 << 30, 64, time.Second, 20 * time.Second, "--broker-pid"},
		{"b:9092", self, 0, time.Second, 20 * time.Second, "--producers"},
		{"b:9092", self, 64, 0, 20 * time.Second, "--every"},
		{"b:9092", self, 64, time.Second, time.Millisecond, "--for"},
	} {
		err := checkTxnCostArgs(tc.brokers, tc.pid, tc.n, tc.every, tc.fr)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%+v: %v; want an error with %q", tc, err, tc.err)
		}
	}
}

// TestWriteCores: the table of where the CPU went has each system's median
// run per million records: its own, the broker's when its pid is known
// ("-" and no sum when not), the harness's, and the sum.
func TestWriteCores(t *testing.T) {
	pt, weir := system{name: "passthrough", kind: "passthrough"}, system{name: "weir", kind: "weir", interval: time.Second}
	c := config{systems: []system{pt, weir}}
	res := []result{
		{system: pt, records: 2_000_000, elapsed: time.Second, cpu: 1400 * time.Millisecond, harnessCPU: 600 * time.Millisecond, brokerCPU: 300 * time.Millisecond},
		{system: weir, records: 1_000_000, elapsed: time.Second, cpu: time.Second, harnessCPU: 400 * time.Millisecond, brokerCPU: 350 * time.Millisecond},
		{system: weir, err: fmt.Errorf("failed")},
	}
	var out strings.Builder
	writeCores(&out, c, res)
	for _, want := range []string{"passthrough              -       0.70          -       0.30          -", "weir                    1s       1.00          -       0.40          -"} {
		if !strings.Contains(out.String(), want+"\n") {
			t.Errorf("without the broker's pid, no line %q in\n%s", want, out.String())
		}
	}
	c.brokerPID = 1
	out.Reset()
	writeCores(&out, c, res)
	for _, want := range []string{"passthrough              -       0.70       0.15       0.30       1.15", "weir                    1s       1.00       0.35       0.40       1.75"} {
		if !strings.Contains(out.String(), want+"\n") {
			t.Errorf("with the broker's pid, no line %q in\n%s", want, out.String())
		}
	}
}

// TestWeirB: weir-b runs --processor-b (else --processor) with
// --weir-b-flags instead of --weir-flags, and the table's "vs weir" column
// divides it by the weir at its own interval.
func TestWeirB(t *testing.T) {
	sys, err := parseSystems("passthrough,weir,weir-b,weir@100ms,weir-b@100ms", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b := &bench{c: config{systems: sys, processor: "/a/processor", weirFlags: []string{"--x", "1"}, processorB: "/b/processor", weirBFlags: []string{"--y", "2"}},
		brokers: []string{"k:9092"}}
	for _, tc := range []struct {
		s       system
		bin     string
		has, no string
	}{
		{sys[1], "/a/processor", "--x 1", "--y"},
		{sys[2], "/b/processor", "--y 2", "--x"},
		{sys[4], "/b/processor", "--y 2 --http-addr 127.0.0.1:0", "--x"},
	} {
		bin, args := b.weirCommand(tc.s, "in", "out", "name", "dir", tc.s.interval != time.Second)
		line := strings.Join(args, " ")
		if bin != tc.bin || !strings.Contains(line, tc.has) || strings.Contains(line, tc.no) || !strings.Contains(line, "--interval "+tc.s.interval.String()) {
			t.Errorf("%s: %s %s", tc.s.name, bin, line)
		}
	}
	b.c.processorB = ""
	if bin, _ := b.weirCommand(sys[2], "in", "out", "name", "dir", false); bin != "/a/processor" {
		t.Errorf("weir-b without --processor-b runs %s, want --processor's", bin)
	}

	var res []result
	for i, s := range sys {
		res = append(res, result{system: s, records: int64(1_000_000 + 100_000*i), elapsed: time.Second})
	}
	var out strings.Builder
	writeTable(&out, b.c, res)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`\nweir-b +1s +1200000 .* 1\.20 +1\.09\n`),          // against weir at 1 s
		regexp.MustCompile(`\nweir-b@100ms +100ms +1400000 .* 1\.40 +1\.08\n`), // against weir@100ms
		regexp.MustCompile(`\nweir@100ms +100ms +1300000 .* 1\.30 +1\.18\n`),   // the others against weir
	} {
		if !want.MatchString(out.String()) {
			t.Errorf("no line matching %s in\n%s", want, out.String())
		}
	}
}

func TestPadValue(t *testing.T) {
	pad := bytes.Repeat([]byte{'.'}, 8)
	for _, tc := range []struct{ pad, v, want string }{
		{string(pad), "123", ".....123"},
		{string(pad), "12345678", "12345678"},
		{string(pad), "123456789", "123456789"},
		{"", "123", "123"},
		{string(pad), "", "........"},
	} {
		if got := padValue([]byte(tc.pad), []byte(tc.v)); string(got) != tc.want {
			t.Errorf("padValue(%q, %q) = %q, want %q", tc.pad, tc.v, got, tc.want)
		}
	}
	v := []byte("12")
	if p := padValue(pad, v); &p[len(p)-1] == &v[1] {
		t.Error("the padded value shares the record's buffer")
	}
}
