package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "usage: processor"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"help"}, 0, "commands:"},
		{[]string{"run", "-h"}, 0, "WEIR_SOME_FLAG"},
		{[]string{"run", "--input", "a", "--output", "b", "--interval", "0s"}, 2, "--interval: must be > 0"},
		{[]string{"run", "--input", "a", "--output", "b", "--txn-timeout", "10s"}, 2, "--txn-timeout: sink transaction timeout 10s is too short"},
		{[]string{"run", "--input", "a", "--output", "b", "--state-backend", "rocksdb"}, 2, `--state-backend: "rocksdb", want pebble or memory`},
		{[]string{"run", "--input", "a", "--output", "b", "--checkpoints", "gs://bucket"}, 2, `--checkpoints: "gs://bucket"`},
		{[]string{"run", "-h"}, 0, "-state-backend"},
		{[]string{"checkpoints"}, 2, "want a subcommand: list, inspect, record, holds or release"},
		{[]string{"checkpoints", "list", "-h"}, 0, "-checkpoints"},
		{[]string{"help"}, 0, "checkpoints list|inspect"},
		{[]string{"generate", "--records", "-1"}, 2, "--topic: required"},
		{[]string{"verify", "--input", "a"}, 2, "--output: required"},
		{[]string{"demo", "--crash-at", "1.5"}, 2, "--crash-at: must be between 0 and 1"},
		{[]string{"probe"}, 2, "probe: want one URL"},
		{[]string{"probe", "http://127.0.0.1:1/readyz"}, 1, "probe: "},
		{[]string{"run", "--input", "a", "--output", "b", "--epoch", "5"}, 2, "--epoch: 5 set without --tasks"},
		{[]string{"run", "--input", "a", "--output", "b", "--config", "/nonexistent/weir.yaml"}, 2, "--config: open /nonexistent/weir.yaml"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tc.args, env(), &stdout, &stderr)
			if code != tc.code {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, tc.code, stderr.String())
			}
			if out := stdout.String() + stderr.String(); !strings.Contains(out, tc.want) {
				t.Errorf("output lacks %q:\n%s", tc.want, out)
			}
		})
	}
}
