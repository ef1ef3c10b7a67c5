package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// commitStats are a system's checkpoints (weir, Flink) or commits (Kafka
// Streams) over a run.
type commitStats struct {
	completed, failed int
	// untriggered are Flink's checkpoints that failed before they began
	// (its first ones, while its tasks start), apart from failed.
	untriggered   int
	p50, p99, max time.Duration // of the completed ones; max 0 if unknown
	source        string        // where the durations come from
}

// weirStats reads weir's checkpoints from its log, written at info: each
// "checkpoint complete" line has a task's checkpoint's exact duration
// (trigger to durable manifest); the failed ones are the sum of its
// weir_checkpoints_aborted_total, scraped from /metrics at the address its
// "serving status page and metrics" line names. Were there no such lines,
// the durations come from the weir_checkpoint_duration_seconds
// histogram's buckets.
func weirStats(ctx context.Context, logFile string) (commitStats, error) {
	var st commitStats
	text, err := os.ReadFile(logFile)
	if err != nil {
		return st, err
	}
	addr, ds := parseWeirLog(string(text))
	if addr == "" {
		return st, errors.New(`no "serving status page and metrics" line in weir's log`)
	}
	body, err := httpGet(ctx, "http://"+addr+"/metrics")
	if err != nil {
		return st, err
	}
	ms, err := parseMetrics(body)
	if err != nil {
		return st, err
	}
	st.failed = int(sumOf(ms, "weir_checkpoints_aborted_total"))
	if len(ds) > 0 {
		st.completed, st.source = len(ds), "each, from its log"
		st.p50, st.p99, st.max = percentiles(ds)
		return st, nil
	}
	st.completed = int(sumOf(ms, "weir_checkpoints_completed_total"))
	bs := buckets(ms, "weir_checkpoint_duration_seconds")
	seconds := func(f float64) time.Duration {
		if math.IsNaN(f) {
			return 0
		}
		return time.Duration(f * float64(time.Second))
	}
	st.p50, st.p99 = seconds(bucketQuantile(0.5, bs)), seconds(bucketQuantile(0.99, bs))
	st.source = "histogram buckets, /metrics"
	return st, nil
}

// parseWeirLog reads weir's text log: the address of its status server
// and the duration of each "checkpoint complete".
func parseWeirLog(text string) (addr string, ds []time.Duration) {
	for line := range strings.Lines(text) {
		switch {
		case strings.Contains(line, `msg="serving status page and metrics"`):
			addr, _ = logAttr(line, "addr")
		case strings.Contains(line, `msg="checkpoint complete"`):
			if v, ok := logAttr(line, "duration"); ok {
				if d, err := time.ParseDuration(v); err == nil {
					ds = append(ds, d)
				}
			}
		}
	}
	return addr, ds
}

// logAttr is the value of attribute key of a log/slog text line, unquoted
// values only.
func logAttr(line, key string) (string, bool) {
	_, v, ok := strings.Cut(line, " "+key+"=")
	if !ok {
		return "", false
	}
	v, _, _ = strings.Cut(strings.TrimRight(v, "\n"), " ")
	return v, true
}

// flinkStats reads Flink's checkpoints from its REST API: the job's
// /jobs/ID/checkpoints counts, and the end-to-end duration (trigger to
// the last acknowledgement) of each completed checkpoint in its history
// (the peer keeps all of them), or Flink's own percentiles if the history
// is short of some.
func flinkStats(ctx context.Context, port int) (commitStats, error) {
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	body, err := httpGet(ctx, base+"/jobs")
	if err != nil {
		return commitStats{}, err
	}
	var jobs struct {
		Jobs []struct {
			ID     string `json:"id"`
			Status string `json:"status"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal([]byte(body), &jobs); err != nil {
		return commitStats{}, fmt.Errorf("/jobs: %w", err)
	}
	if len(jobs.Jobs) != 1 {
		return commitStats{}, fmt.Errorf("/jobs: %d jobs, want 1: %s", len(jobs.Jobs), body)
	}
	if body, err = httpGet(ctx, base+"/jobs/"+jobs.Jobs[0].ID+"/checkpoints"); err != nil {
		return commitStats{}, err
	}
	return parseFlinkCheckpoints(body)
}

// parseFlinkCheckpoints reads Flink's /jobs/ID/checkpoints. Flink counts
// a checkpoint that could not be triggered (while its tasks start) as
// failed, but keeps no history of it: when the history has every other
// checkpoint, those are told apart as untriggered.
func parseFlinkCheckpoints(body string) (commitStats, error) {
	var cs struct {
		Counts struct {
			Total      int `json:"total"`
			InProgress int `json:"in_progress"`
			Completed  int `json:"completed"`
			Failed     int `json:"failed"`
		} `json:"counts"`
		Summary struct {
			EndToEnd struct {
				Max float64 `json:"max"`
				P50 float64 `json:"p50"`
				P99 float64 `json:"p99"`
			} `json:"end_to_end_duration"`
		} `json:"summary"`
		History []struct {
			Status   string `json:"status"`
			EndToEnd int64  `json:"end_to_end_duration"` // ms
		} `json:"history"`
	}
	if err := json.Unmarshal([]byte(body), &cs); err != nil {
		return commitStats{}, fmt.Errorf("checkpoints: %w", err)
	}
	st := commitStats{completed: cs.Counts.Completed, failed: cs.Counts.Failed}
	var ds []time.Duration
	failed := 0
	for _, h := range cs.History {
		switch h.Status {
		case "COMPLETED":
			ds = append(ds, time.Duration(h.EndToEnd)*time.Millisecond)
		case "FAILED":
			failed++
		}
	}
	if len(cs.History) == cs.Counts.Total-(cs.Counts.Failed-failed) {
		st.failed, st.untriggered = failed, cs.Counts.Failed-failed
	}
	if len(ds) == st.completed {
		st.p50, st.p99, st.max = percentiles(ds)
		st.source = "each, from its REST API"
		return st, nil
	}
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	st.p50, st.p99, st.max = ms(cs.Summary.EndToEnd.P50), ms(cs.Summary.EndToEnd.P99), ms(cs.Summary.EndToEnd.Max)
	st.source = "Flink's summary, REST API"
	return st, nil
}

// kstreamsPrefix starts the line the Kafka Streams peer prints its
// commits in as it stops.
const kstreamsPrefix = "weir-bench commits: "

// kstreamsStats reads the commits the Kafka Streams peer printed to its
// log as it stopped.
func kstreamsStats(logFile string) (commitStats, error) {
	text, err := os.ReadFile(logFile)
	if err != nil {
		return commitStats{}, err
	}
	return parseKstreamsCommits(string(text))
}

// parseKstreamsCommits reads the last "weir-bench commits: completed=N
// failed=M durations_us=D,D,..." line of text.
func parseKstreamsCommits(text string) (commitStats, error) {
	var line string
	for l := range strings.Lines(text) {
		if strings.HasPrefix(l, kstreamsPrefix) {
			line = strings.TrimSpace(l)
		}
	}
	if line == "" {
		return commitStats{}, fmt.Errorf("no %q line in the peer's log", strings.TrimSpace(kstreamsPrefix))
	}
	st := commitStats{source: "each, timed in its producer"}
	var ds []time.Duration
	for f := range strings.FieldsSeq(strings.TrimPrefix(line, kstreamsPrefix)) {
		k, v, _ := strings.Cut(f, "=")
		var err error
		switch k {
		case "completed":
			st.completed, err = strconv.Atoi(v)
		case "failed":
			st.failed, err = strconv.Atoi(v)
		case "durations_us":
			for u := range strings.SplitSeq(v, ",") {
				if u == "" {
					continue
				}
				n, perr := strconv.ParseInt(u, 10, 64)
				if perr != nil {
					err = perr
					break
				}
				ds = append(ds, time.Duration(n)*time.Microsecond)
			}
		}
		if err != nil {
			return commitStats{}, fmt.Errorf("%q: %s: %w", line, k, err)
		}
	}
	if len(ds) != st.completed {
		return commitStats{}, fmt.Errorf("%q: %d durations of %d commits", line, len(ds), st.completed)
	}
	st.p50, st.p99, st.max = percentiles(ds)
	return st, nil
}

func httpGet(ctx context.Context, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %.200s", url, resp.Status, b)
	}
	return string(b), nil
}

// A metric is one sample of Prometheus' text format.
type metric struct {
	name   string
	labels map[string]string
	value  float64
}

// parseMetrics reads Prometheus' text exposition format (version 0.0.4).
func parseMetrics(text string) ([]metric, error) {
	var out []metric
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.IndexAny(line, "{ ")
		if i <= 0 {
			return nil, fmt.Errorf("metrics: %q: no value", line)
		}
		m := metric{name: line[:i], labels: map[string]string{}}
		rest := line[i:]
		if rest[0] == '{' {
			var err error
			if rest, err = parseLabels(rest[1:], m.labels); err != nil {
				return nil, fmt.Errorf("metrics: %q: %w", line, err)
			}
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return nil, fmt.Errorf("metrics: %q: no value", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64) // +Inf, -Inf and NaN too
		if err != nil {
			return nil, fmt.Errorf("metrics: %q: %w", line, err)
		}
		m.value = v
		out = append(out, m)
	}
	return out, nil
}

// parseLabels reads `name="value",...}` into labels and returns what
// follows the '}'.
func parseLabels(s string, labels map[string]string) (string, error) {
	for {
		s = strings.TrimLeft(s, " ,")
		if strings.HasPrefix(s, "}") {
			return s[1:], nil
		}
		name, rest, ok := strings.Cut(s, "=")
		if !ok || !strings.HasPrefix(rest, `"`) {
			return "", errors.New("bad label")
		}
		var v strings.Builder
		i := 1
		for ; i < len(rest) && rest[i] != '"'; i++ {
			c := rest[i]
			if c == '\\' && i+1 < len(rest) {
				i++
				switch c = rest[i]; c {
				case 'n':
					c = '\n'
				case '\\', '"':
				default:
					v.WriteByte('\\')
				}
			}
			v.WriteByte(c)
		}
		if i >= len(rest) {
			return "", errors.New("unterminated label value")
		}
		labels[strings.TrimSpace(name)] = v.String()
		s = rest[i+1:]
	}
}

// sumOf is the sum of the samples of metric name (all its label values).
func sumOf(ms []metric, name string) float64 {
	var sum float64
	for _, m := range ms {
		if m.name == name {
			sum += m.value
		}
	}
	return sum
}

// A bucket of a histogram: how many observations were at most le.
type bucket struct{ le, count float64 }

// buckets are histogram name's cumulative buckets summed over its label
// values, by le.
func buckets(ms []metric, name string) []bucket {
	by := map[float64]float64{}
	for _, m := range ms {
		if m.name != name+"_bucket" {
			continue
		}
		if le, err := strconv.ParseFloat(m.labels["le"], 64); err == nil {
			by[le] += m.value
		}
	}
	var out []bucket
	for le, n := range by {
		out = append(out, bucket{le, n})
	}
	slices.SortFunc(out, func(a, b bucket) int { return cmp.Compare(a.le, b.le) })
	return out
}

// bucketQuantile estimates quantile q (0..1) of the observations in
// cumulative buckets bs (by le, the last +Inf) as Prometheus'
// histogram_quantile does: linearly within the bucket where the rank
// falls, the upper bound of the last finite bucket if it falls in +Inf.
// NaN if there are no observations.
func bucketQuantile(q float64, bs []bucket) float64 {
	if len(bs) < 2 || !math.IsInf(bs[len(bs)-1].le, 1) || bs[len(bs)-1].count == 0 {
		return math.NaN()
	}
	rank := q * bs[len(bs)-1].count
	i, _ := slices.BinarySearchFunc(bs, rank, func(b bucket, r float64) int { return cmp.Compare(b.count, r) })
	if i >= len(bs)-1 {
		return bs[len(bs)-2].le
	}
	lower, below := 0.0, 0.0
	if i > 0 {
		lower, below = bs[i-1].le, bs[i-1].count
	}
	if bs[i].count == below {
		return bs[i].le
	}
	return lower + (bs[i].le-lower)*(rank-below)/(bs[i].count-below)
}
