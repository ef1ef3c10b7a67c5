package integration

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/internal/testcluster"
)

// Issue 21's repros: a job's topics change under it (partitions added, a
// topic recreated, an internal topic left from an earlier run), and the
// job must stop and say so rather than process what it cannot process
// correctly.

// msgJobStopped is the ERROR line of a worker whose job stopped.
const msgJobStopped = "job stopped on this worker: it cannot run correctly on its topics as they are; no task runs here until the worker is stopped (SIGTERM)"

// waitStopped waits for p's job to stop and returns the error it logged
// and the line's time.
func waitStopped(ctx context.Context, t *testing.T, p *proc, within time.Duration) (string, time.Time) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	_, line, err := p.WaitLine(wctx, 0, isMsg(msgJobStopped, -1))
	if err != nil {
		t.Fatalf("%s: the job did not stop: %v", p.name, err)
	}
	if !strings.Contains(line, "level=ERROR") {
		t.Errorf("%s: the stop is not logged at ERROR: %s", p.name, line)
	}
	msg, _ := logAttr(line, "err")
	return msg, logTime(line)
}

// checkStoppedHTTP checks that p's /readyz answers 503 with want in it and
// /metrics has weir_job_stopped 1 for reason.
func checkStoppedHTTP(ctx context.Context, t *testing.T, p *proc, reason string, want ...string) {
	t.Helper()
	addr := httpAddr(ctx, t, p)
	code, body := httpGet(ctx, t, "http://"+addr+"/readyz")
	if code != http.StatusServiceUnavailable {
		t.Errorf("%s: /readyz %d %q, want 503", p.name, code, body)
	}
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Errorf("%s: /readyz lacks %q: %s", p.name, w, body)
		}
	}
	_, metrics := httpGet(ctx, t, "http://"+addr+"/metrics")
	if !strings.Contains(metrics, `reason="`+reason+`"} 1`) {
		t.Errorf("%s: /metrics has no weir_job_stopped{reason=%q} 1", p.name, reason)
	}
}

func httpGet(ctx context.Context, t *testing.T, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// terminatedWithError sends SIGTERM to p, whose job stopped, and checks
// that it exits 1 (the job failed), promptly.
func terminatedWithError(t *testing.T, p *proc) {
	t.Helper()
	err, graceful := p.Terminate(time.Minute)
	var ee *exec.ExitError
	if !graceful || !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("%s on SIGTERM after its job stopped: %v (graceful %v), want exit 1", p.name, err, graceful)
	}
}

// waitTopicPartitions waits until the metadata shows topic with n
// partitions.
func waitTopicPartitions(ctx context.Context, t *testing.T, c *testcluster.Cluster, topic string, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...)) // a new client: no cached metadata
		if err != nil {
			t.Fatal(err)
		}
		tds, err := kadm.NewClient(cl).ListTopics(ctx, topic)
		cl.Close()
		if err == nil && tds[topic].Err == nil && len(tds[topic].Partitions) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("topic %s does not show %d partitions within a minute (%v)", topic, n, err)
		}
		poll(ctx, t, 100*time.Millisecond)
	}
}

// inputRec is one record of a count job's input, where it is.
type inputRec struct {
	key       string
	value     int64
	partition int32
}

// readInputRecords reads want records of topic read_committed.
func readInputRecords(ctx context.Context, t *testing.T, c *testcluster.Cluster, topic string, want int64) []inputRec {
	t.Helper()
	cl := c.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	var out []inputRec
	for int64(len(out)) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read input %s: %d of %d records: %v", topic, len(out), want, ctx.Err())
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("read input %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			v, err := strconv.ParseInt(string(r.Value), 10, 64)
			if err != nil {
				t.Fatalf("input %d@%d: %q", r.Partition, r.Offset, r.Value)
			}
			out = append(out, inputRec{key: string(r.Key), value: v, partition: r.Partition})
		})
	}
	return out
}

// TestPartitionsAddedLive is issue 21's first repro: the count job runs
// on 4 partitions (two workers); the input gets 4 more partitions while it
// runs, and more records. Each worker stops the job within
// --layout-check-interval: /readyz 503 and an ERROR line naming the topic
// and both counts, weir_job_stopped{reason="partitions_changed"}. No
// record of partitions 4..7 is ever processed (no task 4..7 exists); the
// output up to the change is exactly once; what the tasks processed of
// partitions 0..3 after the change and before they stopped is right too
// (doubling the count keeps those keys on their partition). A restarted
// worker refuses with the same message.
func TestPartitionsAddedLive(t *testing.T) {
	c := testcluster.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	const keys, before, after = 200, 10_000, 10_000
	j := newCountJob(t, c, 4)
	out := startOutputReader(t, c, j.output, j.partitions)
	flags := append([]string{"--layout-check-interval", "1s"}, groupFlags...)
	workers := []*proc{j.run("w1", "", flags...), j.run("w2", "", flags...)}
	addrs := map[*proc]string{}
	for _, w := range workers {
		addrs[w] = httpAddr(ctx, t, w)
	}
	waitEachTaskOnce(ctx, t, workers, addrs, 4, 90*time.Second)
	startGenerator(t, c, j.input, keys, before, 0).Wait(ctx)
	if err := out.WaitFor(ctx, func(_, distinct int) bool { return distinct >= before }); err != nil {
		t.Fatalf("the output does not cover the first %d records: %v", before, err)
	}

	resp, err := c.Admin(t).CreatePartitions(ctx, 4, j.input)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("add 4 partitions to %s: %v", j.input, err)
	}
	changed := time.Now()
	waitTopicPartitions(ctx, t, c, j.input, 8)
	startGeneratorFrom(t, c, j.input, keys, before, after).Wait(ctx)

	wantMsg := []string{"topic " + j.input + " has 8 partitions, was 4 (partitions were added)", "processor rescale", "new --name"}
	var msgs []string
	for _, w := range workers {
		msg, at := waitStopped(ctx, t, w, 30*time.Second)
		t.Logf("%s stopped %v after the change: %s", w.name, at.Sub(changed).Round(time.Millisecond), msg)
		for _, want := range wantMsg {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: the logged error lacks %q", w.name, want)
			}
		}
		checkStoppedHTTP(ctx, t, w, "partitions_changed", wantMsg[0])
		msgs = append(msgs, msg)
	}
	for _, w := range workers {
		terminatedWithError(t, w)
	}

	again := j.run("w3", "", flags...)
	msg, _ := waitStopped(ctx, t, again, time.Minute)
	if msg != msgs[0] {
		t.Errorf("the restarted worker says\n  %s\nthe running one said\n  %s", msg, msgs[0])
	}
	checkStoppedHTTP(ctx, t, again, "partitions_changed", wantMsg[0])
	terminatedWithError(t, again)
	for _, w := range append(workers, again) {
		for _, l := range w.Lines() {
			if task := logInt(l, "task"); task >= 4 {
				t.Errorf("%s: a line about task %d, which must not exist: %s", w.name, task, l)
			}
		}
	}

	// The output against the input: per key, its records in offset order
	// of its partition; a key whose partition is 4..7 now has its later
	// records there, which must never count.
	in := readInputRecords(ctx, t, c, j.input, before+after)
	type keyIn struct {
		first   []int64 // before the change, on its partition of 0..3
		stayed  []int64 // after it, on the same partition
		moved   int     // after it, on one of 4..7
		oldPart int32
	}
	byKey := map[string]*keyIn{}
	for _, r := range in {
		k := byKey[r.key]
		if k == nil {
			k = &keyIn{oldPart: -1}
			byKey[r.key] = k
		}
		switch {
		case r.value < before:
			k.first, k.oldPart = append(k.first, r.value), r.partition
		case r.partition >= 4:
			k.moved++
		default:
			k.stayed = append(k.stayed, r.value)
		}
	}
	recs := out.Finish(ctx, c)
	seen := map[string]map[int64]bool{}
	var dups, wrong, fromMoved, afterChange int
	for _, o := range recs {
		k := byKey[o.Key]
		if k == nil {
			t.Fatalf("output key %s is no input key", o.Key)
		}
		if seen[o.Key] == nil {
			seen[o.Key] = map[int64]bool{}
		}
		if seen[o.Key][o.Count] {
			dups++
			continue
		}
		seen[o.Key][o.Count] = true
		vals := append(append([]int64(nil), k.first...), k.stayed...)
		if o.Count > int64(len(k.first)) {
			afterChange++
		}
		if o.Count > int64(len(vals)) {
			fromMoved++
			continue
		}
		var sum int64
		for _, v := range vals[:o.Count] {
			sum += v
		}
		if o.Sum != sum {
			wrong++
		}
	}
	missing := 0
	for key, k := range byKey {
		for c := int64(1); c <= int64(len(k.first)); c++ {
			if !seen[key][c] {
				missing++
			}
		}
	}
	t.Logf("output: %d records; %d of them from records after the change, before the stop (partitions 0..3); "+
		"duplicates %d, wrong sums %d, missing of the first %d records %d, counts beyond a key's records on partitions 0..3 %d",
		len(recs), afterChange, dups, wrong, before, missing, fromMoved)
	if dups != 0 || wrong != 0 || missing != 0 || fromMoved != 0 {
		t.Error("the output up to the change is not exactly once, or records of partitions 4..7 were processed")
	}
}

// TestSourceTopicRecreated is issue 21's third repro: the count job read
// 4,000 records of a 2-partition topic and drained; the topic was deleted
// and recreated with 6,000 new records, more than the checkpoint's offsets.
// The restarted job refuses (another topic id) and processes none of them.
func TestSourceTopicRecreated(t *testing.T) {
	c := testcluster.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	const keys, first, second = 100, 4000, 6000
	j := newCountJob(t, c, 2)
	out := startOutputReader(t, c, j.output, j.partitions)
	w := j.run("w1", "", groupFlags...)
	startGenerator(t, c, j.input, keys, first, 0).Wait(ctx)
	if err := out.WaitFor(ctx, func(_, distinct int) bool { return distinct >= first }); err != nil {
		t.Fatalf("the output does not cover the input: %v", err)
	}
	if err, graceful := w.Terminate(time.Minute); err != nil || !graceful {
		t.Fatalf("%s on SIGTERM: %v (graceful %v)", w.name, err, graceful)
	}

	adm := c.Admin(t)
	if resp, err := adm.DeleteTopics(ctx, j.input); err != nil || resp.Error() != nil {
		t.Fatalf("delete %s: %v %v", j.input, err, resp.Error())
	}
	deadline := time.Now().Add(time.Minute)
	for {
		res, err := adm.CreateTopic(ctx, 2, -1, nil, j.input)
		if err == nil {
			err = res.Err
		}
		if err == nil {
			break
		}
		if !errors.Is(err, kerr.TopicAlreadyExists) || time.Now().After(deadline) {
			t.Fatalf("recreate %s: %v", j.input, err)
		}
		poll(ctx, t, 100*time.Millisecond) // a real broker deletes asynchronously
	}
	waitTopicPartitions(ctx, t, c, j.input, 2)
	startGeneratorFrom(t, c, j.input, keys, first, second).Wait(ctx)

	again := j.run("w2", "", groupFlags...)
	msg, _ := waitStopped(ctx, t, again, time.Minute)
	t.Logf("refused: %s", msg)
	for _, want := range []string{"topic " + j.input + " was deleted and recreated: topic id ", "new --name"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error lacks %q", want)
		}
	}
	checkStoppedHTTP(ctx, t, again, "topic_recreated", "was deleted and recreated")
	terminatedWithError(t, again)

	// The output is the first topic's, exactly once: records 0..first-1,
	// key k<i%keys>, value i, each key's in order.
	inFirst := map[string][]int64{}
	for i := range int64(first) {
		k := "k" + strconv.FormatInt(i%keys, 10)
		inFirst[k] = append(inFirst[k], i)
	}
	rep := checkExactlyOnce(inFirst, out.Finish(ctx, c))
	t.Logf("output against the first topic's records: %v", rep)
	assertExactlyOnce(t, rep)
}

// TestWordCountFreshStartRefused is issue 21's fourth repro: wordcount
// over 5,000 lines runs to completion, exactly once; its checkpoints and
// state are deleted and it starts again with --start latest. Its
// repartition topic holds the first run's records, which the new run
// would count again: it refuses at start, naming the topic and the
// command that resets it, and writes nothing. After that reset it runs.
func TestWordCountFreshStartRefused(t *testing.T) {
	c := testcluster.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	j := newCountJob(t, c, 4)
	brokers := strings.Join(c.Brokers, ",")
	flags := append([]string{"--job", "wordcount"}, groupFlags...)
	verify := func(want string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, j.ps.bin, "verify", "--brokers", brokers, "--job", "wordcount",
			"--input", j.input, "--output", j.output, "--wait", "2m")
		b, err := cmd.CombinedOutput()
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		verdict := lines[len(lines)-1]
		t.Logf("verify: %s", verdict)
		if err != nil || !strings.Contains(verdict, want) || !strings.Contains(verdict, "duplicates 0, missing 0, wrong counts 0") {
			t.Fatalf("word count is not exactly once: %v", err)
		}
	}

	w := j.run("w1", "", flags...)
	addrs := map[*proc]string{w: httpAddr(ctx, t, w)}
	waitEachTaskOnce(ctx, t, []*proc{w}, addrs, 4, 90*time.Second)
	gen := exec.CommandContext(ctx, j.ps.bin, "generate", "--brokers", brokers, "--topic", j.input, "--job", "wordcount",
		"--records", "5000", "--keys", "300", "--rate", "5000")
	if b, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("generate: %v\n%s", err, b)
	}
	verify("words in 25000,")
	if err, graceful := w.Terminate(time.Minute); err != nil || !graceful {
		t.Fatalf("%s on SIGTERM: %v (graceful %v)", w.name, err, graceful)
	}

	// The checkpoints and the state go; the name stays.
	for _, dir := range []string{j.checkpoints, j.stateRoot} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	topic := j.name + "-by-word-repartition"
	fresh := j.run("w2", "", append(flags, "--start", "latest")...)
	msg, _ := waitStopped(ctx, t, fresh, time.Minute)
	t.Logf("refused: %s", msg)
	reset := "kafka-topics.sh --bootstrap-server " + brokers + " --delete --topic " + topic
	for _, want := range []string{"internal topic " + topic + " holds ", "earlier run", reset, "new --name"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error lacks %q", want)
		}
	}
	checkStoppedHTTP(ctx, t, fresh, "internal_topic_not_empty", topic)
	terminatedWithError(t, fresh)
	for _, l := range fresh.Lines() {
		if isMsg(msgTaskRestored, -1)(l) {
			t.Errorf("a task started: %s", l)
		}
	}
	verify("words in 25000,")

	// The reset the error names: delete the topic (as kafka-topics.sh
	// --delete does), and the job starts afresh at the input's end.
	adm := c.Admin(t)
	if resp, err := adm.DeleteTopics(ctx, topic); err != nil || resp.Error() != nil {
		t.Fatalf("delete %s: %v %v", topic, err, resp.Error())
	}
	deadline := time.Now().Add(time.Minute)
	for {
		tds, err := adm.ListTopics(ctx, topic)
		if err == nil && errors.Is(tds[topic].Err, kerr.UnknownTopicOrPartition) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still exists a minute after its deletion: %v", topic, err)
		}
		poll(ctx, t, 100*time.Millisecond)
	}
	if err := os.RemoveAll(filepath.Join(j.checkpoints, j.name)); err != nil {
		t.Fatal(err)
	}
	reset2 := j.run("w3", "", append(flags, "--start", "latest")...)
	addrs[reset2] = httpAddr(ctx, t, reset2)
	waitEachTaskOnce(ctx, t, []*proc{reset2}, addrs, 4, 90*time.Second)
	if err, graceful := reset2.Terminate(time.Minute); err != nil || !graceful {
		t.Fatalf("%s after the reset, on SIGTERM: %v (graceful %v)", reset2.name, err, graceful)
	}
	verify("words in 25000,")
}
