//go:build !weirfaults

package main

import (
	"log/slog"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// stateFaults, if set, returns the filesystem of a worker's Pebble stores
// (worker.Options.StateFS), failing as the control file stateFaultsEnv
// names says, or nil for the local disk as it is. It is a test hook, and
// only test builds set it: a processor built with -tags weirfaults
// (statefaults_weirfaults.go) and this package's test binary (TestMain),
// the two worker binaries of the chaos runner. Without it the runner
// cannot inject disk-full or disk-errors, and a production binary has no
// way to make its disk fail.
var stateFaults func(lookup func(string) (string, bool), log *slog.Logger) vfs.FS
