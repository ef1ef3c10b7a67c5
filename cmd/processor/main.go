// Command processor is the weir worker binary.
//
//	processor run       run tasks of a job (count or balance) on Kafka
//	processor generate  write numbered test records (count) or transfers (balance) to a topic
//	processor verify    check that a job's committed output has every input exactly once
//	processor checkpoints list|inspect
//	                    show the checkpoints of a job in checkpoint storage
//	processor demo      all of the above on an embedded Kafka, with a crash and a restore
//
// Every flag can also be set from the environment: --some-flag as
// WEIR_SOME_FLAG; the command line wins. Exit codes: 0 done (run: stopped by
// SIGTERM or SIGINT), 1 failed (verify: the output is not exactly once), 2
// bad command line or settings (the message names the setting); checkpoints:
// 1 for a checkpoint or task that is not there or a manifest that cannot be
// read.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage: processor <command> [flags]

commands:
  run       run tasks of a job on Kafka (count or balance)
  generate  write test records to a topic
  verify    read input and output read_committed and check exactly-once
  checkpoints list|inspect
            show a job's completed checkpoints (sizes, positions, pending transactions)
            or one checkpoint's manifest
  demo      run the balance job on an embedded Kafka, crash it midway, restore, verify

processor <command> -h lists the command's flags. Every flag can also be set
from the environment: --some-flag as WEIR_SOME_FLAG.
`

func main() {
	// SIGTERM and SIGINT cancel the context; the command returns once it
	// has stopped. SIGKILL loses nothing by design: checkpoints and Kafka
	// transactions are the only durable state.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs one command and returns the process exit code.
func run(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch cmd, rest := args[0], args[1:]; cmd {
	case "run":
		err = runCommand(ctx, rest, lookup, stderr)
	case "generate":
		err = generateCommand(ctx, rest, lookup, stdout, stderr)
	case "verify":
		err = verifyCommand(ctx, rest, lookup, stdout, stderr)
	case "checkpoints":
		err = checkpointsCommand(ctx, rest, lookup, stdout, stderr)
	case "demo":
		err = demoCommand(ctx, rest, lookup, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "processor: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	return exitCode(err, stderr)
}

func exitCode(err error, stderr io.Writer) int {
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "processor: bad settings:\n%v\n", err)
		return 2
	}
	fmt.Fprintf(stderr, "processor: %v\n", err)
	return 1
}

func runCommand(ctx context.Context, args []string, lookup func(string) (string, bool), stderr io.Writer) error {
	cfg, err := parseRunConfig(args, lookup, stderr)
	if err != nil {
		return err
	}
	w := &worker{cfg: cfg, log: newLogger(stderr, cfg.LogLevel)}
	return w.run(ctx)
}
