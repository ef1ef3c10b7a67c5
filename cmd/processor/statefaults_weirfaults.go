//go:build weirfaults

package main

import (
	"log/slog"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weirstream/weir/internal/diskfault"
)

// This file makes a test build: `go build -tags weirfaults ./cmd/processor`
// is a worker binary for the chaos runner, whose disks the runner makes
// fail from outside the process (statefaults.go).

var stateFaults = func(lookup func(string) (string, bool), log *slog.Logger) vfs.FS {
	return diskfault.FromEnv(stateFaultsEnv, lookup, log)
}
