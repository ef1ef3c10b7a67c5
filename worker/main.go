package worker

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/weirstream/weir/internal/cli"
)

// Main runs a worker process of one of jobs, or without jobs of one of the
// jobs that registered themselves (stream.Register), configured from os.Args, the
// WEIR_ environment and an optional settings file (--config), and exits:
// 0 after a drain (the first SIGTERM or SIGINT: every task stops reading,
// takes a final checkpoint and commits it, then the worker leaves the
// group; a second signal stops at once), 2 for a bad setting (the message
// names it), 1 if the job failed. It is a complete worker main:
//
//	import _ "example.com/jobs/orders" // registers the job "orders"
//
//	func main() { worker.Main() }
func Main(jobs ...Job) {
	TuneGC()
	ctx, drain, stop := Signals()
	if len(jobs) == 0 {
		jobs = Registered()
	}
	code := Command(ctx, drain, os.Args[1:], os.LookupEnv, os.Stderr, jobs...)
	stop()
	os.Exit(code)
}

// DefaultGCPercent is the garbage collector's target a worker process
// runs with unless GOGC is set: a collection once the heap has grown by 4
// times the live heap, not 1 (Go's default), for a small live heap; for a
// larger one by twice it, but by 128 to 512 MiB (and never less than
// Go's default; see gctune.go). The collector's assists
// stalled the tasks: on the benchmark's count job it raised throughput
// by a third for about twice the memory (docs/benchmarks.md).
const DefaultGCPercent = 400

// TuneGC sets the garbage collector's target to DefaultGCPercent, bounded
// by a headroom over the live heap, unless the GOGC environment variable
// sets one. So that a container's memory
// limit still holds (Pebble's memtables and block cache are Go heap in a
// build without cgo, as the image's), it also sets the soft memory limit
// to 85% of the cgroup's memory limit, if there is one and GOMEMLIMIT is
// not set: near it, the collector runs as often as it must. Main calls
// it; a job's own main that does not use Main may too.
func TuneGC() {
	if _, set := os.LookupEnv("GOGC"); set {
		return
	}
	tuneGCToLiveHeap()
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set {
		if limit := memoryLimit(cgroupMemoryFiles...); limit > 0 {
			debug.SetMemoryLimit(limit / 100 * 85)
		}
	}
}

// cgroupMemoryFiles hold the memory limit of the process's cgroup: v2's,
// v1's.
var cgroupMemoryFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// memoryLimit is the limit in the first of files there is, 0 if it says
// none.
func memoryLimit(files ...string) int64 {
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || n <= 0 || n >= 1<<60 { // "max", or v1's "unlimited"
			return 0
		}
		return n
	}
	return 0
}

// Signals turns SIGTERM and SIGINT into a worker's two ways to stop: the
// first closes drain (a graceful stop, Options.Drain), a second cancels
// ctx (stop at once). SIGKILL loses nothing either: checkpoints and Kafka
// transactions are the only durable state. stop releases ctx.
func Signals() (ctx context.Context, drain <-chan struct{}, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	d := make(chan struct{})
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() { // lives as long as the process
		<-sigs
		close(d)
		<-sigs
		cancel()
	}()
	return ctx, d, cancel
}

// Command runs a worker from args and the environment (lookup) and returns
// the process exit code (see Main); logs and errors go to stderr. Closing
// drain drains the worker.
//
// args may start with "run", so that a job's own binary takes the command
// lines of cmd/processor's run (and a container image's default command
// `run` fits both). "probe URL" instead GETs URL and exits 0 if it answers
// 200: a container healthcheck for images without curl.
func Command(ctx context.Context, drain <-chan struct{}, args []string, lookup func(string) (string, bool), stderr io.Writer, jobs ...Job) int {
	if len(args) > 0 && args[0] == "probe" {
		return ExitCode(Probe(ctx, args[1:], stderr), stderr)
	}
	if len(args) > 0 && args[0] == "run" {
		args = args[1:]
	}
	cfg, err := Parse(args, lookup, stderr)
	if err == nil {
		err = Run(ctx, cfg, jobs, Options{Logger: newLogger(stderr, cfg.LogLevel), Drain: drain})
	}
	return ExitCode(err, stderr)
}

// Probe GETs the one URL in args and returns nil if it answers 200; it
// writes the status and the start of the body to w. It is the `probe`
// command of worker mains and of cmd/processor.
func Probe(ctx context.Context, args []string, w io.Writer) error {
	if len(args) != 1 {
		return cli.UsageError{Err: errors.New("probe: want one URL, as in probe http://127.0.0.1:9464/readyz")}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, args[0], nil)
	if err != nil {
		return cli.UsageError{Err: fmt.Errorf("probe: %w", err)}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	fmt.Fprintf(w, "%s %s", resp.Status, body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("probe %s: %s", args[0], resp.Status)
	}
	return nil
}

// ExitCode is the exit code of a command that returned err, which it
// prints: 0 for nil and -h, 2 for a cli.UsageError, else 1.
func ExitCode(err error, stderr io.Writer) int {
	var ue cli.UsageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "%s: bad settings:\n%v\n", progName(), err)
		return 2
	}
	fmt.Fprintf(stderr, "%s: %v\n", progName(), err)
	return 1
}

func progName() string { return filepath.Base(os.Args[0]) }
