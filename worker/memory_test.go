package worker

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	rtmetrics "runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/internal/proc"
	"github.com/weirstream/weir/internal/testcluster"
	"github.com/weirstream/weir/source"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/stream"
)

// bytesRecord is a record of the bytes job: the input's key and value.
type bytesRecord struct {
	Key   string
	Value []byte
}

// bytesJob passes records through a keyed operator that keeps each key's
// byte count in Pebble: output records are as large as input records.
func bytesJob() Job {
	decode := func(r *kgo.Record) (bytesRecord, error) { return bytesRecord{string(r.Key), r.Value}, nil }
	encode := func(r bytesRecord) (*kgo.Record, error) { return &kgo.Record{Key: []byte(r.Key), Value: r.Value}, nil }
	return NewJob("bytes", func(job *stream.Job) {
		in := stream.Read(job, "input", "input", decode)
		keyed := stream.KeyByPartitioned(in, "by-key", func(r bytesRecord) string { return r.Key }, state.String())
		counted := stream.Process(keyed, "bytes", func(s *stream.Setup) (stream.Processor[string, bytesRecord, bytesRecord], error) {
			total, err := stream.ValueState(s, "total", state.Int64())
			return stream.Processor[string, bytesRecord, bytesRecord]{Process: func(ctx *stream.Context[string, bytesRecord], r bytesRecord) error {
				n, _, err := total.Get()
				if err != nil {
					return err
				}
				if err := total.Set(n + int64(len(r.Value))); err != nil {
					return err
				}
				return ctx.Emit(r)
			}}, err
		})
		stream.Write(counted, "output", "output", encode)
	})
}

// TestMemorySettings: the memory bounds come from flags, WEIR_ variables
// and the settings file like every setting, and a bad one is refused
// naming its flag.
func TestMemorySettings(t *testing.T) {
	file := writeFile(t, "brokers: 127.0.0.1:9092\ninput: in\noutput: out\nproducer-buffer-bytes: 8MiB\nchannel-capacity: 2\n")
	c, err := Parse([]string{"--config", file, "--batch-size", "64"}, env("WEIR_FETCH_MAX_BYTES", "2MiB", "WEIR_MAX_RECORD_BYTES", "100000"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultMemory()
	want.BatchSize, want.ChannelCapacity, want.FetchMaxBytes, want.MaxRecordBytes, want.ProducerBufferBytes = 64, 2, 2<<20, 100_000, 8<<20
	if c.Memory != want {
		t.Errorf("memory settings %+v, want %+v", c.Memory, want)
	}

	for _, tc := range []struct {
		mod  func(*Memory)
		want string
	}{
		{func(m *Memory) { m.BatchSize = 0 }, "--batch-size: 0"},
		{func(m *Memory) { m.ChannelCapacity = -1 }, "--channel-capacity: -1"},
		{func(m *Memory) { m.FetchMaxBytes = 100 << 20 }, "--fetch-max-bytes"},
		{func(m *Memory) { m.FetchMaxPartitionBytes = 32 << 20 }, "--fetch-max-partition-bytes: 33554432, want 1 byte to --fetch-max-bytes"},
		{func(m *Memory) { m.MaxRecordBytes = 0 }, "--max-record-bytes: 0"},
		{func(m *Memory) { m.ProducerBatchMaxBytes = 100 }, "--producer-batch-max-bytes: 100"},
		{func(m *Memory) { m.ProducerBufferBytes = 1 << 10 }, "--producer-buffer-bytes: 1024, want at least --producer-batch-max-bytes"},
		{func(m *Memory) { m.ProducerBufferRecords = 0 }, "--producer-buffer-records: 0"},
		{func(m *Memory) { m.InFlightRecords = 999 }, "--inflight-records: 999, want at least 1000"},
	} {
		c := validConfig()
		tc.mod(&c.Memory)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate() = %v, want an error with %q", err, tc.want)
		}
	}
}

// TestRecordTooLarge: a record over the limits is named with its topic,
// partition and offset and the setting it broke. An input record over
// --max-record-bytes is a bad record: it fails the task or goes to the
// dead-letter topic as --on-decode-error says. An output record over
// --producer-batch-max-bytes, or over the output topic's
// max.message.bytes, fails the task.
func TestRecordTooLarge(t *testing.T) {
	small := func(i int) *kgo.Record {
		return &kgo.Record{Key: []byte("k" + strconv.Itoa(i%7)), Value: bytes.Repeat([]byte{'s'}, 100)}
	}
	// run produces 50 small records, a large one (offset 50), 50 small ones.
	run := func(t *testing.T, large int, mod func(*faultJob, *Config)) *faultJob {
		j := newFaultJob(t)
		cfg := j.config(t)
		cfg.Job = "bytes"
		// A task that fails for good fails fast: the restart backoff is
		// capped at half this.
		cfg.RestartAllowance = 200 * time.Millisecond
		mod(j, &cfg)
		j.stats = &Stats{}
		j.start(t, cfg, []Job{bytesJob()}, Options{Stats: j.stats})
		var rs []*kgo.Record
		for i := range 50 {
			rs = append(rs, small(i))
		}
		rs = append(rs, &kgo.Record{Key: []byte("large"), Value: bytes.Repeat([]byte{'L'}, large)})
		for i := range 50 {
			rs = append(rs, small(51+i))
		}
		j.produceRecords(t, rs...)
		return j
	}
	firstFailure := func(t *testing.T, j *faultJob) error {
		t.Helper()
		j.obs.waitFor(t, 15*time.Second, "the task to fail", func() bool { return len(j.obs.failed) > 0 })
		j.obs.mu.Lock()
		defer j.obs.mu.Unlock()
		err := j.obs.failed[0]
		t.Logf("task failed: %v", err)
		return err
	}
	wantIn := func(t *testing.T, err error, parts ...string) {
		t.Helper()
		for _, p := range parts {
			if !strings.Contains(err.Error(), p) {
				t.Errorf("the error does not say %q", p)
			}
		}
	}

	t.Run("input/fail", func(t *testing.T) {
		j := run(t, 10_000, func(j *faultJob, c *Config) {
			c.Memory.MaxRecordBytes = 4096
			c.OnDecodeError = string(source.Fail)
		})
		err := firstFailure(t, j)
		var de *source.DecodeError
		if !errors.As(err, &de) || !errors.Is(err, ErrRecordTooLarge) {
			t.Errorf("the task failed with %v, want a bad record over --max-record-bytes", err)
		}
		wantIn(t, err, j.in+"/0@50", "10005 bytes", "--max-record-bytes 4096")
	})

	t.Run("input/dead-letter", func(t *testing.T) {
		var dl string
		j := run(t, 10_000, func(j *faultJob, c *Config) {
			dl = testcluster.UniqueName(t, "dl")
			j.cluster.CreateTopics(t, 1, dl)
			c.Memory.MaxRecordBytes = 4096
			c.DeadLetter, c.OnDecodeError = dl, string(source.DeadLetter)
		})
		j.obs.waitFor(t, 15*time.Second, "a checkpoint past the input", func() bool { return j.obs.covered() >= int64(j.produced) })
		close(j.drain)
		if err := <-j.done; err != nil {
			t.Fatalf("worker: %v", err)
		}
		j.done <- nil // for the cleanup
		if out := readCommittedOutput(t, j.cluster, j.out); len(out) != 100 {
			t.Errorf("%d output records, want the 100 small ones", len(out))
		}
		dead := readCommittedOutput(t, j.cluster, dl)
		if len(dead) != 1 || len(dead[0].Value) != 10_000 {
			t.Fatalf("dead letters: %d, want the large record", len(dead))
		}
		h := map[string]string{}
		for _, x := range dead[0].Headers {
			h[x.Key] = string(x.Value)
		}
		if h[source.HeaderOffset] != "50" || h[source.HeaderTopic] != j.in || !strings.Contains(h[source.HeaderError], "--max-record-bytes 4096") {
			t.Errorf("dead letter headers %v, want the record's offset 50, topic %s and the setting", h, j.in)
		}
		t.Logf("dead letter: %s", h[source.HeaderError])
		// weir_dead_letters_total{reason="decode"}
		if n := j.stats.task(0).undecoded.Load(); n != 1 {
			t.Errorf("the worker counted %d records dead-lettered for not decoding, want 1", n)
		}
	})

	t.Run("output/producer", func(t *testing.T) {
		j := run(t, 10_000, func(j *faultJob, c *Config) {
			c.Memory.ProducerBatchMaxBytes = 4096
		})
		err := firstFailure(t, j)
		var re *engine.RecordError
		if !errors.As(err, &re) || !errors.Is(err, ErrRecordTooLarge) || !errors.Is(err, kerr.MessageTooLarge) {
			t.Errorf("the task failed with %v, want the record over --producer-batch-max-bytes", err)
		}
		wantIn(t, err, j.in+"/0@50", "topic "+j.out, "--producer-batch-max-bytes 4096")
	})

	t.Run("output/broker", func(t *testing.T) {
		j := run(t, 40_000, func(j *faultJob, c *Config) {
			c.Output = testcluster.UniqueName(t, "out-small")
			limit := "32768"
			j.cluster.CreateTopicsWith(t, 1, map[string]*string{"max.message.bytes": &limit}, c.Output)
			j.out = c.Output
		})
		err := firstFailure(t, j)
		if !errors.Is(err, ErrRecordTooLarge) || !errors.Is(err, kerr.MessageTooLarge) {
			t.Errorf("the task failed with %v, want the broker's MESSAGE_TOO_LARGE", err)
		}
		wantIn(t, err, j.out+"/0", "max.message.bytes", "--producer-batch-max-bytes")
	})
}

// Memory under a slow output: the worker is a separate process (this test
// binary again, as TestMemoryChild), so that its peak RSS is its own and
// not the in-process broker's, which holds the whole input.
const memoryChildEnv = "WEIR_TEST_MEMORY_CHILD"

// memoryTest are the settings of the worker TestMemoryBoundedWithSlowOutput
// runs, as WEIR_ variables, and the size of its input records.
var memoryTest = struct {
	env         []string
	recordBytes int64
	records     int
}{
	env: []string{
		"WEIR_BATCH_SIZE=64",
		"WEIR_FETCH_MAX_BYTES=2MiB",
		"WEIR_FETCH_MAX_PARTITION_BYTES=1MiB",
		"WEIR_MAX_RECORD_BYTES=64KiB",
		"WEIR_PRODUCER_BATCH_MAX_BYTES=64KiB",
		"WEIR_PRODUCER_BUFFER_BYTES=4MiB",
		"WEIR_STATE_MEMTABLE_SIZE=4MiB",
		"WEIR_STATE_CACHE_SIZE=8MiB",
	},
	recordBytes: 8 << 10,
	records:     12_000,
}

// TestMemoryBoundedWithSlowOutput: with far more input than the output
// takes (the broker answers each produce of the output 20 ms late), the
// worker's peak RSS stays under a bound derived from its memory settings:
// the buffers fill, then block, and the input waits in Kafka.
//
// The bound: a base for the process (Go runtime, Kafka clients, Pebble,
// HTTP, 64 MiB), plus twice (the garbage collector's headroom at
// GOGC=100) what the settings let the task hold: one fetch being read and
// one buffered (2 × --fetch-max-bytes), a poll's batch and the one being
// processed (2 × --batch-size records), the producer's buffer
// (--producer-buffer-bytes), two memtables and the block cache. The Go
// heap's peak, which the worker samples, has a base of 16 MiB. (With the
// producer's buffer bounded by records only, as franz-go's default, both
// went past their bounds: 141 MiB RSS and 101 MiB heap.)
func TestMemoryBoundedWithSlowOutput(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's shadow memory multiplies a process's RSS: the bound is for the worker as built to run")
	}
	c := testcluster.Kafka(t)
	if c.Fake == nil {
		t.Skip("needs the in-process broker (kfake) to answer produces late; KAFKA_BROKERS or testcontainers gave a real one")
	}
	in, out := testcluster.UniqueName(t, "in"), testcluster.UniqueName(t, "out")
	c.CreateTopics(t, 1, in, out)
	m := DefaultMemory()
	m.BatchSize, m.FetchMaxBytes, m.ProducerBufferBytes = 64, 2<<20, 4<<20
	const memtable, cache = 4 << 20, 8 << 20
	settings := 2*m.FetchMaxBytes + 2*int64(m.BatchSize)*memoryTest.recordBytes + m.ProducerBufferBytes + 2*memtable + cache
	bound, heapBound := 64<<20+2*settings, 16<<20+2*settings

	var rs []*kgo.Record
	value := bytes.Repeat([]byte{'v'}, int(memoryTest.recordBytes))
	for i := range memoryTest.records {
		rs = append(rs, &kgo.Record{Topic: in, Key: []byte("k" + strconv.Itoa(i%100)), Value: value})
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := c.Client(t, kgo.ProducerBatchMaxBytes(1<<20)).ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	backlog := int64(memoryTest.records) * memoryTest.recordBytes

	// The broker answers the output's produces late, taking others (the
	// control functions run in turn) meanwhile. Produce requests name
	// topics by id.
	tds, err := c.Admin(t).ListTopics(ctx, out)
	if err != nil || tds[out].Err != nil {
		t.Fatalf("topic id of %s: %v %v", out, err, tds[out].Err)
	}
	outID := tds[out].ID
	c.Fake.ControlKey(kmsg.Produce.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.Fake.KeepControl()
		for _, tp := range req.(*kmsg.ProduceRequest).Topics {
			if tp.Topic == out || tp.TopicID == outID {
				c.Fake.SleepControl(func() { time.Sleep(20 * time.Millisecond) })
				break
			}
		}
		return nil, nil, false
	})

	var stderr syncBuffer
	cmd := exec.Command(os.Args[0], "-test.run=^TestMemoryChild$")
	cmd.Env = append(os.Environ(), memoryChildEnv+"=1", "GOGC=100",
		"WEIR_BROKERS="+strings.Join(c.Brokers, ","), "WEIR_INPUT="+in, "WEIR_OUTPUT="+out, "WEIR_TASKS=0",
		"WEIR_NAME="+testcluster.UniqueName(t, "bytes"), "WEIR_CHECKPOINTS=file://"+t.TempDir(), "WEIR_STATE_DIR="+t.TempDir(),
		"WEIR_HTTP_ADDR=off", "WEIR_INTERVAL=500ms")
	heapFile := filepath.Join(t.TempDir(), "heap")
	cmd.Env = append(cmd.Env, memoryTest.env...)
	cmd.Env = append(cmd.Env, memoryHeapFileEnv+"="+heapFile)
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("worker output:\n%s", stderr.String())
		}
	}()

	// Run until the output has taken a few of the producer's buffers:
	// the buffers are full, and have been emptied and filled again.
	adm := c.Admin(t)
	written := func() int64 {
		ends, err := adm.ListEndOffsets(ctx, out)
		if err != nil {
			return 0
		}
		o, _ := ends.Lookup(out, 0)
		return o.Offset
	}
	want := 3 * m.ProducerBufferBytes / memoryTest.recordBytes
	var peak int64
	for tick := time.NewTicker(100 * time.Millisecond); written() < want; {
		select {
		case err := <-exited:
			t.Fatalf("the worker exited: %v", err)
		case <-ctx.Done():
			t.Fatalf("the output has %d of %d records after %v", written(), want, time.Minute)
		case <-tick.C:
			peak = max(peak, proc.PeakRSS(cmd.Process.Pid))
		}
	}
	peak = max(peak, proc.PeakRSS(cmd.Process.Pid))
	hb, _ := os.ReadFile(heapFile)
	heap, _ := strconv.ParseInt(string(hb), 10, 64)
	n := written()
	t.Logf("worker peak RSS %.1f MiB (bound %.1f MiB), peak Go heap %.1f MiB (bound %.1f MiB); the settings hold %.1f MiB; %d records written of %d, input backlog %.0f MiB",
		mib(peak), mib(bound), mib(heap), mib(heapBound), mib(settings), n, memoryTest.records, mib(backlog))
	if peak == 0 || heap == 0 {
		t.Fatal("no peak RSS read from /proc, or no peak heap from the worker")
	}
	if peak > bound {
		t.Errorf("peak RSS %.1f MiB is over the bound %.1f MiB", mib(peak), mib(bound))
	}
	if heap > heapBound {
		t.Errorf("peak Go heap %.1f MiB is over the bound %.1f MiB", mib(heap), mib(heapBound))
	}
	if n*memoryTest.recordBytes > backlog/2 {
		t.Errorf("the output took %d of %d records: the input was not plentiful, the test shows nothing", n, memoryTest.records)
	}
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// TestMemoryChild is the worker of TestMemoryBoundedWithSlowOutput, run in
// a process of its own; it is skipped otherwise.
func TestMemoryChild(t *testing.T) {
	if os.Getenv(memoryChildEnv) != "1" {
		t.Skip("the worker process of TestMemoryBoundedWithSlowOutput, not a test of its own")
	}
	ctx, drain, stop := Signals()
	defer stop()
	go sampleHeap(os.Getenv(memoryHeapFileEnv)) // lives as long as the process
	code := Command(ctx, drain, []string{"run"}, os.LookupEnv, os.Stderr, bytesJob())
	if code != 0 {
		t.Fatalf("worker exited with %d", code)
	}
}

// memoryHeapFileEnv names the file where TestMemoryChild writes the peak
// of its Go heap.
const memoryHeapFileEnv = "WEIR_TEST_MEMORY_HEAP_FILE"

// sampleHeap writes the peak of the Go heap's objects (live and not yet
// collected) into file, sampled every 10 ms. Unlike RSS, the race
// detector's shadow memory is not in it.
func sampleHeap(file string) {
	s := []rtmetrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	var peak uint64
	for range time.Tick(10 * time.Millisecond) {
		rtmetrics.Read(s)
		if v := s[0].Value.Uint64(); v > peak {
			peak = v
			// Renamed into place: the test reads it at any moment.
			tmp := file + ".tmp"
			if os.WriteFile(tmp, []byte(strconv.FormatUint(peak, 10)), 0o644) == nil {
				os.Rename(tmp, file)
			}
		}
	}
}
