package integration

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/internal/partition"
	"github.com/weirstream/weir/internal/testcluster"
	"github.com/weirstream/weir/source"
)

// misKeyedInput writes the count job's input with some records where the
// input's partitioner does not put their key: records 0..n-1 (keys k0..k29)
// by franz-go's default partitioner, murmur2, as the count job's KeyBy
// expects, and between them, at each of at, a record of key k3 in a
// partition murmur2 does not give k3 (as a producer with another
// partitioner would write it). It returns each key's values in the order
// of its partition, less the strays, and the strays' (partition, offset).
func misKeyedInput(ctx context.Context, t *testing.T, c *testcluster.Cluster, topic string, partitions int32, n int64, at ...int64) (map[string][]int64, []kgo.Record) {
	t.Helper()
	const keys = 30
	cl := c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	home := int32(partition.Murmur2.Partition([]byte("k3"), int(partitions)))
	in := map[string][]int64{}
	var strays []kgo.Record
	for i := range n {
		r := numberedRecord(topic, i, keys)
		r.Partition = int32(partition.Murmur2.Partition(r.Key, int(partitions)))
		stray := false
		for _, a := range at {
			stray = stray || a == i
		}
		if stray {
			r.Key = []byte("k3")
			r.Partition = (home + 1 + int32(len(strays))%(partitions-1)) % partitions
		}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
		if stray {
			strays = append(strays, *r)
			continue
		}
		in[string(r.Key)] = append(in[string(r.Key)], i)
	}
	t.Logf("k3 belongs to partition %d of %d; strays: %v", home, partitions, where(strays))
	return in, strays
}

func where(rs []kgo.Record) []string {
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%s/%d@%d", r.Topic, r.Partition, r.Offset))
	}
	return out
}

// TestMisKeyedInput: the count job keys by the Kafka record key, declaring
// that the input is partitioned by it (KeyBy moves no record). Over input
// that is not, every record of a key in another task's partition is a bad
// record: with --on-decode-error fail the worker fails, naming the
// record's topic, partition, offset and key and where the key belongs;
// with a dead-letter topic the records go there with their coordinates and
// the job counts the others exactly once.
func TestMisKeyedInput(t *testing.T) {
	c := testcluster.Kafka(t)
	const partitions = 3
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	t.Run("fail", func(t *testing.T) {
		j := newCountJob(t, c, partitions)
		_, strays := misKeyedInput(ctx, t, c, j.input, partitions, 200, 120)
		s := strays[0]
		w := j.run("worker", "0,1,2", "--interval", "200ms", "--on-decode-error", "fail")
		err := w.ExitErr(2 * time.Minute)
		if err == nil {
			t.Fatal("the worker exited 0 over a mis-keyed record")
		}
		out := strings.Join(w.Lines(), "\n")
		home := partition.Murmur2.Partition([]byte("k3"), partitions)
		for _, want := range []string{
			fmt.Sprintf("%s/%d@%d", j.input, s.Partition, s.Offset),
			fmt.Sprintf(`key "k3" (bytes "k3") belongs to task %d, not task %d (murmur2 puts it in partition %d of %d)`, home, s.Partition, home, partitions),
			"KeyByPartitioned by-key", "stream.KeyBy,", "--partitioner",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("the worker's output does not say %q", want)
			}
		}
		if t.Failed() {
			w.dump(30)
		} else {
			t.Logf("the worker exited with %v:\n%s", err, w.Lines()[len(w.Lines())-1])
		}
		// Final: one failure, not a restart loop.
		if n := strings.Count(out, "task failed, restarting"); n != 0 {
			t.Errorf("the task restarted %d times over a record that fails every time", n)
		}
	})

	t.Run("dead-letter", func(t *testing.T) {
		j := newCountJob(t, c, partitions)
		dl := testcluster.UniqueName(t, "dl")
		c.CreateTopics(t, 1, dl)
		const n = 300
		in, strays := misKeyedInput(ctx, t, c, j.input, partitions, n, 50, 150, 250)
		r := startOutputReader(t, c, j.output, partitions)
		w := j.run("worker", "0,1,2", "--interval", "200ms", "--dead-letter", dl)
		if err := r.WaitFor(ctx, func(records, _ int) bool { return records >= n-len(strays) }); err != nil {
			t.Fatalf("output: %v", err)
		}
		if err, graceful := w.Terminate(time.Minute); err != nil || !graceful {
			t.Fatalf("drain: %v (graceful %v)", err, graceful)
		}
		rep := checkExactlyOnce(in, r.Finish(ctx, c))
		assertExactlyOnce(t, rep)
		t.Logf("the others: %v", rep)

		// The tasks dead-letter in their own time: match by coordinates.
		dead := map[string]*kgo.Record{}
		for _, d := range readDeadLetters(ctx, t, c, dl, len(strays)) {
			h := headers(d)
			dead[h[source.HeaderTopic]+"/"+h[source.HeaderPartition]+"@"+h[source.HeaderOffset]] = d
		}
		for _, s := range strays {
			at := fmt.Sprintf("%s/%d@%d", j.input, s.Partition, s.Offset)
			d := dead[at]
			if d == nil {
				t.Errorf("no dead letter of the stray at %s; got %v", at, dead)
				continue
			}
			if err := headers(d)[source.HeaderError]; string(d.Key) != "k3" || d.Value != nil || !strings.Contains(err, "belongs to task") {
				t.Errorf("dead letter of %s: key %q value %q error %q; want key k3, no value, the error", at, d.Key, d.Value, err)
			}
		}
		if got := strings.Count(strings.Join(w.Lines(), "\n"), "dead-lettered a record keyed by a key of another task"); got != len(strays) {
			t.Errorf("the worker warned of %d dead-lettered records, want %d", got, len(strays))
		}
	})
}

func headers(r *kgo.Record) map[string]string {
	h := map[string]string{}
	for _, x := range r.Headers {
		h[x.Key] = string(x.Value)
	}
	return h
}

// readDeadLetters reads want records of topic (one partition), in order.
func readDeadLetters(ctx context.Context, t *testing.T, c *testcluster.Cluster, topic string, want int) []*kgo.Record {
	t.Helper()
	cl := c.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var out []*kgo.Record
	for len(out) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("dead letters in %s: %d of %d: %v", topic, len(out), want, ctx.Err())
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("read %s: %v", topic, err) })
		out = append(out, fs.Records()...)
	}
	if len(out) != want {
		t.Errorf("%d dead letters, want %d", len(out), want)
	}
	return out
}

// TestRepartitionKeysWithAnotherPartitioner: a job has one partitioner,
// the input producers' (--partitioner): weir writes its repartition topics
// with it too, so that a key is in the same task in every topic the job
// reads, and the word count's words, keyed after the hop, pass the check.
func TestRepartitionKeysWithAnotherPartitioner(t *testing.T) {
	c := testcluster.Kafka(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	const partitions = 3
	j := newCountJob(t, c, partitions)
	brokers := strings.Join(c.Brokers, ",")
	gen := exec.CommandContext(ctx, j.ps.bin, "generate", "--brokers", brokers, "--topic", j.input, "--job", "wordcount",
		"--records", "1000", "--keys", "100")
	if out, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("generate: %v\n%s", err, out)
	}
	w := j.run("worker", "0,1,2", "--job", "wordcount", "--interval", "200ms", "--partitioner", "crc32")
	verify := exec.CommandContext(ctx, j.ps.bin, "verify", "--brokers", brokers, "--job", "wordcount",
		"--input", j.input, "--output", j.output, "--wait", "2m")
	out, err := verify.CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	verdict := lines[len(lines)-1]
	t.Logf("verify: %s", verdict)
	if err != nil || !strings.Contains(verdict, "duplicates 0, missing 0, wrong counts 0") {
		t.Errorf("word count with --partitioner crc32 is not exactly once: %v", err)
	}
	if err, graceful := w.Terminate(time.Minute); err != nil || !graceful {
		t.Errorf("worker on SIGTERM: %v (graceful %v)", err, graceful)
	}
}
