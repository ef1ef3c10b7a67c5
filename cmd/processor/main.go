// Command processor is the weir worker binary.
//
//	processor run       run tasks of a job (count, balance or wordcount) on Kafka
//	processor generate  write numbered test records (count) or transfers (balance) to a topic
//	processor verify    check that a job's committed output has every input exactly once
//	processor checkpoints list|inspect|record|holds|release
//	                    show the checkpoints of a job in checkpoint storage; record
//	                    what became of transactions the broker forgot; list and
//	                    release the holds that stop tasks
//	processor demo      all of the above on an embedded Kafka, with a crash and a restore
//	processor chaos     the count job on several workers under random faults, verified
//
// Every flag can also be set from the environment: --some-flag as
// WEIR_SOME_FLAG; the command line wins. Exit codes: 0 done (run: drained by
// SIGTERM or SIGINT: sources stopped, a final checkpoint committed; a second
// signal stops at once), 1 failed (verify: the output is not exactly once), 2
// bad command line or settings (the message names the setting); checkpoints:
// 1 for a checkpoint or task that is not there or a manifest that cannot be
// read.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/weirstream/weir/worker"
)

const usage = `usage: processor <command> [flags]

commands:
  run       run a worker of a job on Kafka (count, balance, wordcount, nexmark-q0..q8); workers of one
            job share its tasks through a consumer group
  generate  write test records to a topic
  verify    read input and output read_committed and check exactly-once
  checkpoints list|inspect|record|holds|release
            show a job's completed checkpoints (sizes, positions, pending transactions)
            or one checkpoint's manifest; record what became of transactions the
            broker forgot; list and release the holds that stop tasks
  demo      run the balance job on an embedded Kafka, crash it midway, restore, verify
  chaos     run the count job on several workers against a real broker and S3 while injecting
            faults (kill -9, SIGSTOP, SIGTERM, broker restarts, S3 and disk faults), then verify
  probe URL exit 0 if URL answers 200 (a container healthcheck: probe http://127.0.0.1:9464/readyz)

processor <command> -h lists the command's flags. Every flag can also be set
from the environment: --some-flag as WEIR_SOME_FLAG.
`

func main() {
	// The first SIGTERM or SIGINT drains `run` (sources stop, a final
	// checkpoint commits, exit 0) and stops the other commands; a second one
	// stops at once.
	worker.TuneGC()
	ctx, drain, stop := worker.Signals()
	code := runDrainable(ctx, drain, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs one command and returns the process exit code.
func run(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) int {
	return runDrainable(ctx, nil, args, lookup, stdout, stderr)
}

// runDrainable is run with a graceful stop: closing drain drains `run`
// (final checkpoint, then exit) and cancels the other commands.
func runDrainable(ctx context.Context, drain <-chan struct{}, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "run" {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-drain:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch cmd, rest := args[0], args[1:]; cmd {
	case "run":
		err = runCommand(ctx, drain, rest, lookup, stderr)
	case "generate":
		err = generateCommand(ctx, rest, lookup, stdout, stderr)
	case "verify":
		err = verifyCommand(ctx, rest, lookup, stdout, stderr)
	case "checkpoints":
		err = checkpointsCommand(ctx, rest, lookup, stdout, stderr)
	case "demo":
		err = demoCommand(ctx, rest, lookup, stdout, stderr)
	case "chaos":
		err = chaosCommand(ctx, rest, lookup, stdout, stderr)
	case "probe":
		err = worker.Probe(ctx, rest, stdout)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "processor: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	return worker.ExitCode(err, stderr)
}

// jobs are the jobs the processor runs (--job): those that registered
// themselves (see jobs.go).
var jobs = worker.Registered()

func runCommand(ctx context.Context, drain <-chan struct{}, args []string, lookup func(string) (string, bool), stderr io.Writer) error {
	cfg, err := worker.Parse(args, lookup, stderr)
	if err != nil {
		return err
	}
	if cfg.Job == "" {
		cfg.Job = "count"
	}
	opts := worker.Options{Logger: newLogger(stderr, cfg.LogLevel), Drain: drain}
	if stateFaults != nil { // a test build (statefaults.go)
		opts.StateFS = stateFaults(lookup, opts.Logger)
	}
	return worker.Run(ctx, cfg, jobs, opts)
}

// newLogger returns a text logger on w at level (valid: Parse checked it).
func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}
