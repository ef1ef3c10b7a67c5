package integration

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/internal/testcluster"
)

// TestWordCountAcrossWorkers: the word count job repartitions words through
// an internal topic, so each word is counted by one task whatever partition
// its lines came in. Three workers share the tasks; while lines are being
// written one is killed with SIGKILL and another joins. Every word's
// counts 1..n must be in the output exactly once.
func TestWordCountAcrossWorkers(t *testing.T) {
	c := testcluster.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	const partitions = 4
	j := newCountJob(t, c, partitions)
	brokers := strings.Join(c.Brokers, ",")
	gen := func(from, n int) {
		t.Helper()
		cmd := exec.CommandContext(ctx, j.ps.bin, "generate", "--brokers", brokers, "--topic", j.input, "--job", "wordcount",
			"--from", strconv.Itoa(from), "--records", strconv.Itoa(n), "--keys", "300", "--rate", "2000")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("generate: %v\n%s", err, out)
		}
	}
	run := func(name string) *proc {
		return j.run(name, "", append([]string{"--job", "wordcount"}, groupFlags...)...)
	}
	workers := []*proc{run("w1"), run("w2"), run("w3")}
	addrs := map[*proc]string{}
	for _, w := range workers {
		addrs[w] = httpAddr(ctx, t, w)
	}
	waitEachTaskOnce(ctx, t, workers, addrs, partitions, 90*time.Second)
	gen(0, 6000)
	// A worker dies with its tasks' transactions open, and a new one joins.
	workers[0].Kill9()
	w4 := run("w4")
	addrs[w4] = httpAddr(ctx, t, w4)
	gen(6000, 6000)
	live := []*proc{workers[1], workers[2], w4}
	waitEachTaskOnce(ctx, t, live, addrs, partitions, 90*time.Second)

	cmd := exec.CommandContext(ctx, j.ps.bin, "verify", "--brokers", brokers, "--job", "wordcount",
		"--input", j.input, "--output", j.output, "--wait", "2m")
	out, err := cmd.CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	verdict := lines[len(lines)-1]
	t.Logf("verify: %s (after %d re-reads)", verdict, len(lines)-1)
	if err != nil || !strings.Contains(verdict, "words in 60000,") || !strings.Contains(verdict, "duplicates 0, missing 0, wrong counts 0") {
		t.Fatalf("word count is not exactly once: %v", err)
	}
	for _, w := range live {
		if err, graceful := w.Terminate(60 * time.Second); err != nil || !graceful {
			t.Errorf("%s on SIGTERM: %v", w.name, err)
		}
	}
}
