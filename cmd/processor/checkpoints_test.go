package main

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
)

// writeManifest stores a manifest the way the checkpoint driver does.
func writeManifest(t *testing.T, st checkpoint.Storage, m checkpoint.Manifest) {
	t.Helper()
	b, err := checkpoint.EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutIfAbsent(context.Background(), checkpoint.ManifestName(m.Job, m.Task, m.Checkpoint), b); err != nil {
		t.Fatal(err)
	}
}

// testManifest is checkpoint id of task 0 of job "jobx": a source, a Pebble
// operator with a shared SST and a private MANIFEST, and a sink with one
// pending transaction.
func testManifest(task int, id checkpoint.ID, offset int64) checkpoint.Manifest {
	return checkpoint.Manifest{
		Version: checkpoint.FormatVersion, Job: "jobx", Task: task, Checkpoint: id,
		Timestamp: time.Date(2026, 3, 4, 5, 6, 7, 890_000_000, time.UTC), Epoch: 77,
		Operators: []checkpoint.Ack{
			{Operator: "input", Sources: []checkpoint.SourcePosition{{Source: "input", Topic: "numbers", Partition: int32(task), Offset: offset}}},
			{Operator: "count", Alignment: 3 * time.Millisecond, State: &checkpoint.StateHandle{
				Backend: "pebble", Size: 3000, Incremental: 1000,
				Files: []checkpoint.FileRef{
					{Name: "jobx/shared/0/count/abc/000005.sst", Local: "000005.sst", Size: 2000, SHA256: strings.Repeat("a", 64), Shared: true},
					{Name: checkpoint.CheckpointDir("jobx", task, id) + "count/MANIFEST-000001", Local: "MANIFEST-000001", Size: 1000, CRC32C: "0123abcd"},
				},
			}},
			{Operator: "output", Committables: []checkpoint.Committable{{Operator: "output", TransactionalID: "jobx-output-0-2", ProducerID: 4001, Epoch: 6}}},
		},
	}
}

// testStorage holds checkpoints 3 and 5 of task 0 (5 without pending
// transactions), a started but incomplete checkpoint 6 of task 0, and
// checkpoint 2 of task 1.
func testStorage(t *testing.T) (string, checkpoint.Storage) {
	t.Helper()
	dir := t.TempDir()
	uri := "file://" + dir
	st, err := checkpoint.Open(context.Background(), uri)
	if err != nil {
		t.Fatal(err)
	}
	writeManifest(t, st, testManifest(0, 3, 100))
	m5 := testManifest(0, 5, 250)
	m5.Operators[2].Committables = nil
	writeManifest(t, st, m5)
	if err := st.Put(context.Background(), checkpoint.CheckpointDir("jobx", 0, 6)+"count/000009.log", strings.NewReader("")); err != nil {
		t.Fatal(err)
	}
	writeManifest(t, st, testManifest(1, 2, 40))
	return uri, st
}

// runCLI runs processor with args and the environment env.
func runCLI(t *testing.T, env func(string) (string, bool), args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errw bytes.Buffer
	code = run(t.Context(), args, env, &out, &errw)
	return code, out.String(), errw.String()
}

func TestCheckpointsList(t *testing.T) {
	uri, _ := testStorage(t)
	code, out, stderr := runCLI(t, env(), "checkpoints", "list", "--checkpoints", uri, "--name", "jobx")
	t.Log("\n" + out)
	if code != 0 {
		t.Fatalf("exit code %d; stderr:\n%s", code, stderr)
	}
	for _, want := range []string{
		"TASK  ID  TIME",
		"0     3   2026-03-04 05:06:07.890  2.9 KiB  1000 B       numbers/0@100     jobx-output-0-2 4001/6",
		"0     5*  2026-03-04 05:06:07.890  2.9 KiB  1000 B       numbers/0@250     -",
		"1     2*  2026-03-04 05:06:07.890  2.9 KiB  1000 B       numbers/1@40      jobx-output-0-2 4001/6",
		"task 0: checkpoint 6 was started after the newest and has no manifest",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("list output lacks %q", want)
		}
	}

	// One task, from the environment, as JSON.
	code, out, stderr = runCLI(t, env("WEIR_CHECKPOINTS", uri, "WEIR_JOB", "jobx", "WEIR_TASK", "0"), "checkpoints", "list", "--json")
	if code != 0 {
		t.Fatalf("exit code %d; stderr:\n%s", code, stderr)
	}
	var rows []checkpointSummary
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("list --json: %v\n%s", err, out)
	}
	if len(rows) != 2 || rows[0].Checkpoint != 3 || rows[1].Checkpoint != 5 || rows[0].Newest || !rows[1].Newest {
		t.Fatalf("list --json rows: %+v", rows)
	}
	r := rows[0]
	if r.Task != 0 || r.Size != 3000 || r.Incremental != 1000 || r.Epoch != 77 ||
		!reflect.DeepEqual(r.Sources, []checkpoint.SourcePosition{{Source: "input", Topic: "numbers", Partition: 0, Offset: 100}}) ||
		len(r.Committables) != 1 || r.Committables[0].TransactionalID != "jobx-output-0-2" || r.Committables[0].ProducerID != 4001 || r.Committables[0].Epoch != 6 {
		t.Errorf("list --json row: %+v", r)
	}
	// The fields a summary shares with a manifest read back into one.
	var objs []checkpoint.Manifest
	if err := json.Unmarshal([]byte(out), &objs); err != nil || objs[1].Checkpoint != 5 || objs[1].Job != "jobx" || objs[1].Version != checkpoint.FormatVersion {
		t.Errorf("list --json as manifests: %+v, %v", objs, err)
	}
}

func TestCheckpointsInspect(t *testing.T) {
	uri, st := testStorage(t)
	code, out, stderr := runCLI(t, env(), "checkpoints", "inspect", "--checkpoints", uri, "--name", "jobx", "--task", "0", "--id", "3")
	t.Log("\n" + out)
	if code != 0 {
		t.Fatalf("exit code %d; stderr:\n%s", code, stderr)
	}
	for _, want := range []string{
		"checkpoint 3 of job jobx, task 0 (not the newest of 2 completed)",
		"manifest  jobx/tasks/0/chk-00000000000000000003/manifest.json",
		"epoch     77",
		"version   1",
		"state     2.9 KiB full, 1000 B incremental",
		"position  numbers/0@100",
		"alignment  3ms",
		"state      pebble backend, 2 files, 2.9 KiB full, 1000 B incremental",
		"2000  shared  sha256:aaaaaaaaaaaa…  000005.sst       jobx/shared/0/count/abc/000005.sst",
		"1000  no      crc32c:0123abcd       MANIFEST-000001  jobx/tasks/0/chk-00000000000000000003/count/MANIFEST-000001",
		"pending transaction  jobx-output-0-2  producer id 4001  epoch 6",
		"pending transactions: 1",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect output lacks %q", want)
		}
	}

	code, out, stderr = runCLI(t, env(), "checkpoints", "inspect", "--checkpoints", uri, "--name", "jobx", "--task", "0", "--id", "latest", "--json")
	if code != 0 {
		t.Fatalf("exit code %d; stderr:\n%s", code, stderr)
	}
	var got checkpoint.Manifest
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("inspect --json: %v\n%s", err, out)
	}
	want, err := checkpoint.ReadManifest(t.Context(), st, "jobx", 0, 5)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("inspect --json --id latest:\n got %+v\nwant %+v", got, want)
	}
}

func TestCheckpointsErrors(t *testing.T) {
	uri, st := testStorage(t)
	// A manifest that fails its checksum: listed as unreadable, exit 1.
	if err := st.PutIfAbsent(t.Context(), checkpoint.ManifestName("jobx", 2, 1), []byte(`{"version":1,"sha256":"00","manifest":{}}`)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no subcommand", nil, 2, "want a subcommand: list, inspect, record, holds or release"},
		{"unknown subcommand", []string{"show"}, 2, `unknown subcommand "show"`},
		{"help", []string{"list", "-h"}, 0, "WEIR_SOME_FLAG"},
		{"no name", []string{"list", "--checkpoints", uri}, 2, "--name: required"},
		{"bad name", []string{"list", "--checkpoints", uri, "--name", "a/b"}, 2, `--name: "a/b"`},
		{"memory storage", []string{"list", "--checkpoints", "memory", "--name", "jobx"}, 2, "--checkpoints: memory storage lives inside the process"},
		{"no such directory", []string{"list", "--checkpoints", uri + "/nope", "--name", "jobx"}, 2, "--checkpoints: " + strings.TrimPrefix(uri, "file://") + "/nope is not a directory"},
		{"bad storage", []string{"list", "--checkpoints", "s4://x", "--name", "jobx"}, 2, `--checkpoints: "s4://x", want file:///path, s3://bucket/prefix or memory`},
		{"bad s3 setting", []string{"list", "--checkpoints", "s3://b/p?colour=red", "--name", "jobx"}, 2, `--checkpoints: checkpoint storage "s3://b/p?colour=red": unknown setting "colour"`},
		{"negative task", []string{"list", "--checkpoints", uri, "--name", "jobx", "--task", "-2"}, 2, "--task: -2 is negative"},
		{"inspect needs task and id", []string{"inspect", "--checkpoints", uri, "--name", "jobx"}, 2, "--task: required"},
		{"inspect bad id", []string{"inspect", "--checkpoints", uri, "--name", "jobx", "--task", "0", "--id", "newest"}, 2, `--id: "newest", want a checkpoint id`},
		{"stray argument", []string{"list", "--checkpoints", uri, "--name", "jobx", "extra"}, 2, "unexpected arguments: extra"},
		{"unknown job", []string{"list", "--checkpoints", uri, "--name", "joby"}, 1, `no checkpoints of job "joby"`},
		{"task without checkpoints", []string{"list", "--checkpoints", uri, "--name", "jobx", "--task", "7"}, 1, `task 7 of job "jobx" has no completed checkpoints`},
		{"missing checkpoint", []string{"inspect", "--checkpoints", uri, "--name", "jobx", "--task", "0", "--id", "4"}, 1,
			`checkpoint 4 of job "jobx" task 0 not found in ` + uri + ` (completed: 3, 5)`},
		{"missing task", []string{"inspect", "--checkpoints", uri, "--name", "jobx", "--task", "9", "--id", "latest"}, 1, `task 9 of job "jobx" has no completed checkpoints`},
		{"corrupt manifest", []string{"list", "--checkpoints", uri, "--name", "jobx"}, 1, "task 2: 1 unreadable manifests"},
		{"corrupt manifest inspected", []string{"inspect", "--checkpoints", uri, "--name", "jobx", "--task", "2", "--id", "1"}, 1, "corrupt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, stderr := runCLI(t, env(), append([]string{"checkpoints"}, tc.args...)...)
			if code != tc.code || !strings.Contains(out+stderr, tc.want) {
				t.Fatalf("exit code %d, want %d with %q; stdout:\n%s\nstderr:\n%s", code, tc.code, tc.want, out, stderr)
			}
		})
	}
}
