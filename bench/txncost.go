package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/internal/proc"
)

// txnCostMain measures what a transaction costs the broker, apart from
// its records: `bench txncost --brokers B --broker-pid P` runs N
// producers (one a partition, as weir's tasks), each writing one record
// every interval and then committing a transaction; then the same with
// idempotent producers that flush instead of committing. It reads the
// broker process's CPU from /proc around each, so the broker must run on
// this machine. It prints the broker's CPU per round of each and what a
// commit adds: the broker's share of a checkpoint, paid per task per
// interval whatever the records. A broker just started pays several times
// what a warm one does (its JIT): run it a few times, or on a broker the
// benchmarks have warmed.
func txnCostMain(args []string) int {
	fs, a := txnCostFlags()
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := checkTxnCostArgs(*a.brokers, *a.pid, *a.producers, *a.every, *a.span); err != nil {
		fmt.Fprintln(os.Stderr, "bench txncost:", err)
		return 2
	}
	ctx := context.Background()
	seeds := strings.Split(*a.brokers, ",")
	var cores, rates [2]float64 // transactional, idempotent
	for i, txn := range []bool{true, false} {
		rounds, cpu, elapsed, err := txnCostRun(ctx, seeds, *a.pid, *a.producers, *a.every, *a.span, txn)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench txncost:", err)
			return 1
		}
		cores[i], rates[i] = cpu.Seconds()/elapsed.Seconds(), float64(rounds)/elapsed.Seconds()
		mode := "idempotent, flush"
		if txn {
			mode = "transactional, commit"
		}
		fmt.Printf("%-22s %d producers  %7.1f rounds/s  broker %.3f cores  %.2f ms broker CPU a round\n",
			mode, *a.producers, rates[i], cores[i], cores[i]*1000/max(rates[i], 1e-9))
	}
	// The broker's idle work is in both; the difference is the commits'.
	fmt.Printf("a transaction adds %.2f ms of broker CPU to a flush\n", (cores[0]-cores[1])*1000/max(rates[0], 1e-9))
	return 0
}

type txnCostArgs struct {
	brokers        *string
	pid, producers *int
	every, span    *time.Duration
}

// txnCostFlags are the flags of bench txncost.
func txnCostFlags() (*flag.FlagSet, txnCostArgs) {
	fs := flag.NewFlagSet("txncost", flag.ContinueOnError)
	return fs, txnCostArgs{
		brokers:   fs.String("brokers", os.Getenv("KAFKA_BROKERS"), "Kafka bootstrap addresses, comma-separated"),
		pid:       fs.Int("broker-pid", 0, "the broker's process id (its CPU is read from /proc)"),
		producers: fs.Int("producers", 64, "producers, one partition each (as tasks)"),
		every:     fs.Duration("every", time.Second, "each producer's round: one record, then a commit or a flush"),
		span:      fs.Duration("for", 20*time.Second, "measured span of each mode, after a warm-up of 2 s"),
	}
}

// txnCostUsage prints bench txncost's usage and flags.
func txnCostUsage(w io.Writer) {
	fmt.Fprintln(w, "\nusage: bench txncost --brokers host:port --broker-pid PID [flags]: what a transaction costs the broker")
	fs, _ := txnCostFlags()
	fs.SetOutput(w)
	fs.PrintDefaults()
}

func checkTxnCostArgs(brokers string, pid, producers int, every, span time.Duration) error {
	switch {
	case brokers == "":
		return errors.New("--brokers: none given")
	case pid <= 0:
		return errors.New("--broker-pid: a process id is needed (the broker's CPU is what is measured)")
	case producers < 1 || producers > 1024:
		return fmt.Errorf("--producers %d: want 1 to 1024", producers)
	case every < time.Millisecond:
		return fmt.Errorf("--every %v: want at least 1ms", every)
	case span < time.Second:
		return fmt.Errorf("--for %v: want at least 1s", span)
	}
	if _, err := proc.CPU(pid); err != nil {
		return fmt.Errorf("--broker-pid %d: %w", pid, err)
	}
	return nil
}

// txnCostRun runs one mode on a topic of its own and returns the rounds
// completed and the broker's CPU in the measured span.
func txnCostRun(ctx context.Context, seeds []string, pid, n int, every, span time.Duration, txn bool) (rounds int64, cpu, elapsed time.Duration, err error) {
	topic := fmt.Sprintf("bench-txncost-%d", time.Now().UnixNano())
	adm, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return 0, 0, 0, err
	}
	defer adm.Close()
	resp, err := kadm.NewClient(adm).CreateTopic(ctx, int32(n), -1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return 0, 0, 0, fmt.Errorf("create topic %s: %w", topic, err)
	}
	var (
		done   atomic.Int64
		failed error
		mu     sync.Mutex
		wg     sync.WaitGroup
	)
	stop := make(chan struct{})
	clients := make([]*kgo.Client, n)
	defer func() {
		for _, cl := range clients {
			if cl != nil {
				cl.Close()
			}
		}
	}()
	for i := range clients {
		opts := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner())}
		if txn {
			opts = append(opts, kgo.TransactionalID(topic+"-"+strconv.Itoa(i)))
		}
		if clients[i], err = kgo.NewClient(opts...); err != nil {
			return 0, 0, 0, err
		}
	}
	value := []byte(strings.Repeat("x", 100))
	for i, cl := range clients {
		wg.Go(func() {
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
				}
				if err := txnCostRound(ctx, cl, int32(i), value, txn); err != nil {
					mu.Lock()
					failed = errors.Join(failed, err)
					mu.Unlock()
					return
				}
				done.Add(1)
			}
		})
	}
	time.Sleep(2 * time.Second)
	r0, c0, t0 := done.Load(), mustCPU(pid), time.Now()
	time.Sleep(span)
	r1, c1, t1 := done.Load(), mustCPU(pid), time.Now()
	close(stop)
	wg.Wait()
	if failed != nil {
		return 0, 0, 0, failed
	}
	if c0 < 0 || c1 < 0 {
		return 0, 0, 0, fmt.Errorf("broker process %d: its CPU could not be read", pid)
	}
	return r1 - r0, c1 - c0, t1.Sub(t0), nil
}

// txnCostRound writes one record to partition p, waits for its
// acknowledgement, and commits it if txn.
func txnCostRound(ctx context.Context, cl *kgo.Client, p int32, value []byte, txn bool) error {
	if txn {
		if err := cl.BeginTransaction(); err != nil {
			return err
		}
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Partition: p, Value: value}).FirstErr(); err != nil {
		return err
	}
	if txn {
		return cl.EndTransaction(ctx, kgo.TryCommit)
	}
	return nil
}

func mustCPU(pid int) time.Duration {
	d, err := proc.CPU(pid)
	if err != nil {
		return -1
	}
	return d
}
