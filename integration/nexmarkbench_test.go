package integration

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/internal/kafkabench"
	"github.com/weirstream/weir/internal/testcluster"
)

// TestNexmarkBench runs the Nexmark harness of `kafkabench --nexmark`
// small: the input written, each query's worker run to the end of it, the
// steady-state figures taken and printed. It checks the harness, not the
// speed.
func TestNexmarkBench(t *testing.T) {
	c := testcluster.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cfg := kafkabench.Config{Brokers: c.Brokers, Interval: 200 * time.Millisecond, Dir: t.TempDir()}
	nc := kafkabench.NexmarkConfig{Queries: []string{"q0", "q5"}, Events: 200_000, Runs: 1}
	gen, runs, err := kafkabench.Nexmark(ctx, cfg, nc, processorBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 {
		t.Fatalf("runs %+v, want one per query", runs)
	}
	for _, r := range runs {
		if r.Events <= 0 || r.Events > nc.Events || r.Elapsed <= 0 || r.CPU <= 0 || r.Total < r.Elapsed {
			t.Errorf("run %+v: figures out of range", r)
		}
	}
	var out bytes.Buffer
	cfg.Partitions = 4
	kafkabench.WriteNexmarkTable(&out, cfg, nc, gen, runs)
	t.Logf("\n%s", out.String())
	for _, want := range []string{"200000 events", "\nq0 ", "\nq5 ", "155000", "22000"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table has no %q", want)
		}
	}
}
