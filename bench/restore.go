package main

import (
	"context"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// restoreValue is the size of a value of the restore benchmark's input,
// and so of a key's state.
const restoreValue = 1000

// probes is how many keys each restart's probe records update.
const probes = 1000

// restore is one system's restore times after kill -9.
type restore struct {
	system   string
	keys     int64
	disk     int64           // its local state on disk after the load, bytes
	stored   int64           // weir: its checkpoint storage, bytes
	load     time.Duration   // from start to the load's last result visible
	kept     []time.Duration // restarts with the local state directory kept
	lost     []time.Duration // restarts with it deleted (a new machine)
	check    error
	timeouts time.Duration // the session timeout waited out before each restart
	// weir: bytes its restores downloaded from checkpoint storage and
	// reused from local files, over the restarts with the local state
	// kept and with it deleted (from its "pebble restore" log lines).
	keptFetched, keptReused, lostFetched, lostReused int64
}

// restoreRun measures system s's restore: it loads keys records of about
// a kilobyte, one per key (key k<i>, value "<i>:<random padding>"), into
// a fresh topic, runs the last job on it until every result is visible,
// then c.runs times: kill -9, wait out the group's session timeout (so
// that the restart does not wait for the dead member), write probe records
// updating probes keys, restart, and time from the restart to the last
// probe's result visible read_committed. Then c.runs times again with the
// local state directory deleted before the restart. Every result is
// checked: each key's results are the sequence numbers of its values in
// order, each once, so a restore that lost state or duplicated output
// fails the run.
func (b *bench) restoreRun(ctx context.Context, s string) (restore, error) {
	name := fmt.Sprintf("bench-%s-restore-%s", s, b.suffix)
	in, out := name+"-in", name+"-out"
	dir := filepath.Join(b.dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return restore{}, err
	}
	defer os.RemoveAll(dir)
	for _, t := range []string{in, out} {
		if err := b.create(ctx, t); err != nil {
			return restore{}, err
		}
	}
	defer b.delete(in, out, name+"-")
	keys := max(int64(b.c.restoreMB)*1_000_000/restoreValue, probes)
	res := restore{system: s, keys: keys, timeouts: b.c.restoreSession + time.Second}

	b.log.Info("restore: loading the input", "system", s, "keys", keys, "bytes", keys*restoreValue)
	rng := rand.New(rand.NewChaCha8([32]byte{byte(len(s))}))
	if err := b.produce(ctx, in, keys, func(i int64) (int64, int64) { return i, i }, rng); err != nil {
		return res, fmt.Errorf("load: %w", err)
	}

	chk := newLastChecker()
	rctx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	reader := make(chan error, 1)
	go func() { reader <- b.readEach(rctx, out, chk.take) }()
	want := keys
	// wait waits for want results, timing from start.
	wait := func(cmd *exec.Cmd, exited chan error, start time.Time, limit time.Duration) (time.Duration, error) {
		deadline := time.After(limit)
		for chk.seen() < want {
			select {
			case err := <-exited:
				exited <- err
				return 0, fmt.Errorf("the process exited with %d of %d results visible: %v (log in %s)", chk.seen(), want, err, dir)
			case err := <-reader:
				return 0, fmt.Errorf("reading the output: %v", err)
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-deadline:
				return 0, fmt.Errorf("%d of %d results visible after %v (log in %s)", chk.seen(), want, limit, dir)
			case <-time.After(5 * time.Millisecond):
			}
		}
		return time.Since(start), nil
	}

	start := time.Now()
	cmd, err := b.startLast(s, in, out, name, dir)
	if err != nil {
		return res, err
	}
	exited, stop := watch(cmd)
	if res.load, err = wait(cmd, exited, start, 20*time.Minute); err != nil {
		stop()
		return res, err
	}
	res.disk = diskUsage(filepath.Join(dir, "state"))
	res.stored = diskUsage(filepath.Join(dir, "checkpoints"))
	b.log.Info("restore: loaded", "system", s, "in", res.load.Round(time.Millisecond), "state_mb", res.disk>>20, "checkpoints_mb", res.stored>>20)

	for round := range 2 * b.c.runs {
		lose := round >= b.c.runs
		_ = cmd.Process.Kill()
		<-exited
		time.Sleep(res.timeouts)
		if lose {
			if err := os.RemoveAll(filepath.Join(dir, "state")); err != nil {
				return res, err
			}
		}
		// Round r updates keys j·keys/probes to seq keys + r·probes + j.
		base := keys + int64(round)*probes
		if err := b.produce(ctx, in, probes, func(j int64) (int64, int64) { return j * (keys / probes), base + j }, rng); err != nil {
			return res, fmt.Errorf("probes: %w", err)
		}
		want += probes
		logged := diskUsage(filepath.Join(dir, "log"))
		start := time.Now()
		if cmd, err = b.startLast(s, in, out, name, dir); err != nil {
			return res, err
		}
		exited, stop = watch(cmd)
		d, err := wait(cmd, exited, start, 10*time.Minute)
		if err != nil {
			stop()
			return res, err
		}
		b.log.Info("restore: restarted", "system", s, "local_state", map[bool]string{false: "kept", true: "deleted"}[lose], "in", d.Round(time.Millisecond))
		fetched, reused := restoredBytes(filepath.Join(dir, "log"), logged)
		if lose {
			res.lost = append(res.lost, d)
			res.lostFetched, res.lostReused = res.lostFetched+fetched, res.lostReused+reused
		} else {
			res.kept = append(res.kept, d)
			res.keptFetched, res.keptReused = res.keptFetched+fetched, res.keptReused+reused
		}
	}
	time.Sleep(time.Second) // for duplicates
	stop()
	stopReading()
	<-reader
	res.check = chk.verify(keys, 2*b.c.runs)
	return res, nil
}

// produce writes n records of restoreValue bytes to topic: the i-th has
// key k<key> and value "<seq>:<padding>" for key, seq = at(i), the
// padding random (so that no store compresses it away).
func (b *bench) produce(ctx context.Context, topic string, n int64, at func(int64) (key, seq int64), rng *rand.Rand) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...), kgo.ProducerLinger(5*time.Millisecond),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		return err
	}
	defer cl.Close()
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"
	errc := make(chan error, 1)
	for i := range n {
		key, seq := at(i)
		v := make([]byte, 0, restoreValue)
		v = strconv.AppendInt(v, seq, 10)
		v = append(v, ':')
		for len(v) < restoreValue {
			u := rng.Uint64()
			for k := 0; k < 10 && len(v) < restoreValue; k++ {
				v = append(v, alphabet[u&63])
				u >>= 6
			}
		}
		cl.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte("k" + strconv.FormatInt(key, 10)), Value: v}, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errc <- err:
				default:
				}
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// startLast starts system s's last job.
func (b *bench) startLast(s, in, out, name, dir string) (*exec.Cmd, error) {
	brokers := strings.Join(b.brokers, ",")
	session := b.c.restoreSession
	var cmd *exec.Cmd
	switch s {
	case "weir":
		cmd = exec.Command(b.self, "last", "run", "--job", "last", "--name", name, "--brokers", brokers,
			"--input", in, "--output", out, "--checkpoints", "file://"+filepath.Join(dir, "checkpoints"),
			"--state-dir", filepath.Join(dir, "state"), "--interval", "1s", "--http-addr", "off",
			"--session-timeout", session.String(), "--heartbeat-interval", (session / 3).String())
	case "kstreams":
		cmd = exec.Command("java", "-cp", b.peerClasspath(s), "weir.bench.Last", brokers, in, out, name,
			filepath.Join(dir, "state"), strconv.FormatInt(session.Milliseconds(), 10))
	default:
		return nil, fmt.Errorf("no restore job for %s", s)
	}
	f, err := os.OpenFile(filepath.Join(dir, "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = f, f
	err = cmd.Start()
	f.Close() // the child has its own descriptor
	return cmd, err
}

// restoredBytes sums the downloaded_bytes and reused_bytes of weir's
// "pebble restore" log lines in the log file past offset from.
func restoredBytes(log string, from int64) (fetched, reused int64) {
	b, err := os.ReadFile(log)
	if err != nil || from > int64(len(b)) {
		return 0, 0
	}
	attr := func(line, key string) int64 {
		v, _ := logAttr(line, key)
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	}
	for line := range strings.Lines(string(b[from:])) {
		if strings.Contains(line, `msg="pebble restore"`) {
			fetched += attr(line, "downloaded_bytes")
			reused += attr(line, "reused_bytes")
		}
	}
	return fetched, reused
}

// diskUsage is the size of the files under dir, 0 if there is none.
func diskUsage(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// lastChecker checks the last job's output: key k<i> was loaded with seq
// i, and round r's probes gave keys j·(keys/probes) seq keys + r·probes
// + j, so each key's results, in order, are -1 and then the seqs of its
// earlier values.
type lastChecker struct {
	mu    sync.Mutex
	n     int64
	prevs map[string][]int64
	bad   []string
}

func newLastChecker() *lastChecker { return &lastChecker{prevs: make(map[string][]int64)} }

func (c *lastChecker) seen() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func (c *lastChecker) take(r *kgo.Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	p, err := strconv.ParseInt(string(r.Value), 10, 64)
	if err != nil {
		if len(c.bad) < 5 {
			c.bad = append(c.bad, fmt.Sprintf("%s/%d@%d: value %q", r.Topic, r.Partition, r.Offset, r.Value))
		}
		return
	}
	c.prevs[string(r.Key)] = append(c.prevs[string(r.Key)], p)
}

// verify says whether the output was exactly once with every restore
// complete, for keys loaded keys and rounds probe rounds.
func (c *lastChecker) verify(keys int64, rounds int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	bad := slices.Clone(c.bad)
	var wrong int
	step := keys / probes
	for i := range keys {
		k := "k" + strconv.FormatInt(i, 10)
		want := []int64{-1}
		if j := i / step; i%step == 0 && j < probes {
			want = append(want, i)
			for r := range int64(rounds - 1) {
				want = append(want, keys+r*probes+j)
			}
		}
		if got := c.prevs[k]; !slices.Equal(got, want) {
			wrong++
			if len(bad) < 5 {
				bad = append(bad, fmt.Sprintf("key %s: previous seqs %v, want %v", k, got, want))
			}
		}
	}
	if extra := len(c.prevs) - int(keys); extra > 0 {
		bad = append(bad, fmt.Sprintf("%d results for keys never written", extra))
	}
	if wrong == 0 && len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%d keys' results wrong (lost state, duplicates or missing results): %v", wrong, bad)
}
