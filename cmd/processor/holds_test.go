package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
)

// TestCheckpointsHolds: `checkpoints holds` lists what a task's hold says,
// `checkpoints release` deletes exactly the hold named, and the task's
// checkpoints stay.
func TestCheckpointsHolds(t *testing.T) {
	uri, st := testStorage(t)
	when := time.Date(2026, 12, 6, 18, 0, 0, 0, time.UTC)
	if err := checkpoint.PutHold(t.Context(), st, "jobx", 2, checkpoint.Hold{Name: "merged-transaction-0011", Time: when, Reason: "counts/1 from offset 5120 holds two transactions"}); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runCLI(t, env(), "checkpoints", "holds", "--checkpoints", uri, "--name", "jobx")
	if code != 0 || !strings.Contains(out, "2     merged-transaction-0011  2026-12-06T18:00:00Z") ||
		!strings.Contains(out, "task 2, hold merged-transaction-0011: counts/1 from offset 5120 holds two transactions") {
		t.Fatalf("holds: exit %d\n%s%s", code, out, stderr)
	}
	code, out, stderr = runCLI(t, env(), "checkpoints", "list", "--checkpoints", uri, "--name", "jobx")
	if code != 0 || !strings.Contains(out, "task 2 is held (merged-transaction-0011): it does not start until released") {
		t.Fatalf("list: exit %d, want task 2 shown held\n%s%s", code, out, stderr)
	}
	code, out, stderr = runCLI(t, env(), "checkpoints", "holds", "--checkpoints", uri, "--name", "jobx", "--task", "2", "--json")
	var row holdRow
	if err := json.Unmarshal([]byte(out), &row); code != 0 || err != nil || row.Task != 2 || row.Name != "merged-transaction-0011" || !row.Time.Equal(when) {
		t.Fatalf("holds --json: exit %d, %v, %+v\n%s%s", code, err, row, out, stderr)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no task", []string{"--hold", "merged-transaction-0011"}, 2, "--task: required"},
		{"no hold", []string{"--task", "2"}, 2, `--hold: ""`},
		{"bad hold", []string{"--task", "2", "--hold", "../x"}, 2, `--hold: "../x"`},
		{"other task", []string{"--task", "1", "--hold", "merged-transaction-0011"}, 1, `task 1 of job "jobx" has no hold "merged-transaction-0011"`},
		{"other hold", []string{"--task", "2", "--hold", "merged-transaction-0012"}, 1, `has no hold "merged-transaction-0012"`},
	} {
		code, out, stderr := runCLI(t, env(), append([]string{"checkpoints", "release", "--checkpoints", uri, "--name", "jobx"}, tc.args...)...)
		if code != tc.code || !strings.Contains(out+stderr, tc.want) {
			t.Errorf("release %s: exit %d, want %d with %q\n%s%s", tc.name, code, tc.code, tc.want, out, stderr)
		}
	}
	if hs, err := checkpoint.Holds(t.Context(), st, "jobx", 2); err != nil || len(hs) != 1 {
		t.Fatalf("after the refused releases: %+v, %v; want the hold still there", hs, err)
	}
	code, out, stderr = runCLI(t, env(), "checkpoints", "release", "--checkpoints", uri, "--name", "jobx", "--task", "2", "--hold", "merged-transaction-0011")
	if code != 0 || !strings.Contains(out, "released hold merged-transaction-0011 of task 2") {
		t.Fatalf("release: exit %d\n%s%s", code, out, stderr)
	}
	if code, out, _ = runCLI(t, env(), "checkpoints", "holds", "--checkpoints", uri, "--name", "jobx"); code != 0 || !strings.Contains(out, "no holds") {
		t.Fatalf("holds after the release: exit %d\n%s", code, out)
	}
	if code, out, _ = runCLI(t, env(), "checkpoints", "list", "--checkpoints", uri, "--name", "jobx"); code != 0 || strings.Contains(out, "held") {
		t.Fatalf("list after the release: exit %d, want no task held\n%s", code, out)
	}
}
