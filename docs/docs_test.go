package docs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestDocCommands runs every command of the docs' ```sh blocks that can run
// here, in the order of its page, and checks that every other one is run
// by the test or .ci/run step its row names.
//
// Each page runs in a session of its own: a temporary directory, a Kafka
// cluster from internal/testcluster (kfake in process, or the broker named
// by KAFKA_BROKERS) once the page starts one, its background jobs. What a
// session substitutes, and nothing else (session.rewrite):
//
//   - $B, which the docs set with B=$(scripts/kafka start), is the test's
//     broker; scripts/kafka start itself is run by .ci/run;
//   - /tmp/weir-* paths (file:///tmp/weir-checkpoints) are under the
//     session's directory, which is also TMPDIR, where the workers' default
//     state and checkpoint directories live;
//   - the values of --topic, --input, --output, --dead-letter and --name,
//     and the job instance name of every worker (WEIR_NAME, else derived
//     from --job), are unique per session, so that a shared real broker
//     never sees two runs' topics, groups or transactional ids mix;
//   - go build -o X writes X into the session's directory, and ./X runs it;
//   - 127.0.0.1:9464 is the status address the session's first worker
//     logged (the default port, unless something else on this host held it);
//   - WEIR_KAFKA_DIR is in the session's directory (scripts/kafka status
//     finds no broker there), and no WEIR_ variable of the caller leaks in.
//
// Commands run from the repository root. Background jobs (a trailing &)
// get a process group each, as in an interactive shell, so kill %N signals
// the group; wait requires every job stopped with SIGTERM or SIGINT to have
// exited 0 (drained). Commands that need Docker run only when `docker info`
// and `docker compose version` succeed.
func TestDocCommands(t *testing.T) {
	root := repoRoot(t)
	files := docFiles(t, root)
	byText := map[string][]docCommand{}
	var all []docCommand
	for _, f := range files {
		cmds, err := readCommands(root, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cmds {
			byText[c.text] = append(byText[c.text], c)
			all = append(all, c)
		}
	}
	var missing []string
	for _, c := range all {
		if _, ok := commands[c.text]; !ok {
			missing = append(missing, fmt.Sprintf("%s:%d: %s", c.file, c.line, c.text))
		}
	}
	if len(missing) > 0 {
		t.Fatalf("commands in the docs that the table in docs_test.go does not classify (add a row: run it here, or name the test or .ci/run step that runs it):\n%s",
			strings.Join(missing, "\n"))
	}
	for text, h := range commands {
		if len(byText[text]) == 0 {
			t.Errorf("the table classifies a command that is in no doc (remove its row): %s", text)
		}
		for _, r := range h.by {
			if err := r.check(root); err != nil {
				t.Errorf("%s: %v", text, err)
			}
		}
	}
	if t.Failed() {
		return
	}
	for _, c := range all {
		t.Logf("%s:%d: %s: %s", c.file, c.line, commands[c.text].describe(), c.text)
	}

	d := probeDocker()
	ran := map[string]docCommand{} // the commands marked once that ran already
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			s := newSession(t, root, f, d)
			for _, c := range all {
				if c.file != f {
					continue
				}
				h := commands[c.text]
				if prev, ok := ran[c.text]; ok && h.once {
					t.Logf("%s:%d: ran already at %s:%d", c.file, c.line, prev.file, prev.line)
					continue
				}
				s.step(c, h)
				if t.Failed() {
					return
				}
				if h.once && (h.run || h.docker && d.err == nil) {
					ran[c.text] = c
				}
			}
		})
	}
	if d.err != nil {
		t.Run("docker", func(t *testing.T) {
			t.Skipf("no Docker engine here (%v): the docker commands of the docs were not run. "+
				"TestComposeSmoke (integration/composesmoke_test.go, `make compose-smoke`, run by .ci/run) runs "+
				"docker-compose.yml's service commands and environment as processes on this host, "+
				"and the go build steps of the quick start compile the main packages the Dockerfile's targets compile", d.err)
		})
	}
}

// how says how a command of the docs is covered: run here (run, or docker
// when an engine answers), or by the tests and steps in by.
type how struct {
	run    bool
	docker bool
	broker bool // B=$(scripts/kafka start): $B becomes the test's broker
	by     []ref
	// once: run at its first place only (it needs nothing a page set up).
	once bool
	// exit is the exit code the command must return; want, strings its
	// output must contain.
	exit int
	want []string
	// retry re-runs it until it passes or this long has passed.
	retry time.Duration
	// untilCaughtUp: a worker in the foreground that the reader stops with
	// Ctrl-C once it has caught up. Run in the background until every task
	// it runs has checkpointed the end of its input, then SIGINT, exit 0.
	untilCaughtUp bool
	// background: a command that stays in the foreground (docker compose
	// up) while the reader goes on in another shell.
	background bool
	// after runs once the command passed.
	after func(*session) error
}

func (h how) describe() string {
	var refs []string
	for _, r := range h.by {
		refs = append(refs, r.String())
	}
	switch {
	case h.broker:
		return "substituted ($B is the test's broker), and scripts/kafka start runs in " + strings.Join(refs, ", ")
	case h.run:
		return "run here"
	case h.docker:
		return "run here when a Docker engine answers"
	}
	return "run by " + strings.Join(refs, ", ")
}

// ref names where a command runs instead: file must contain text.
type ref struct{ file, text, name string }

func (r ref) String() string {
	if r.name != "" {
		return r.name + " (" + r.file + ")"
	}
	return r.file + " (" + r.text + ")"
}

func (r ref) check(root string) error {
	b, err := os.ReadFile(filepath.Join(root, r.file))
	if err != nil {
		return fmt.Errorf("covered by %v: %w", r, err)
	}
	if !strings.Contains(string(b), r.text) {
		return fmt.Errorf("covered by %v, but %s does not contain %q", r, r.file, r.text)
	}
	return nil
}

func ciStep(text string) ref {
	return ref{file: ".ci/run", text: text, name: ".ci/run step `" + text + "`"}
}

var (
	composeSmoke = []ref{
		{file: "integration/composesmoke_test.go", text: "func TestComposeSmoke(", name: "TestComposeSmoke"},
		{file: "Makefile", text: "compose-smoke:", name: "make compose-smoke"},
		ciStep("KAFKA_BROKERS=$addr make compose-smoke"),
	}
	verdictClean = []string{"duplicates 0, missing 0"}
)

// commands classifies every command of the docs, by its text (continuation
// lines joined, the comment removed, blanks collapsed).
var commands = map[string]how{
	// The demo: the same command in README.md, docs/quickstart.md and
	// examples/balance/README.md. cmd/processor's TestDemo runs it smaller.
	"go run ./cmd/processor demo": {run: true, once: true, want: []string{"EXACTLY ONCE", "duplicates 0, missing 0, wrong balances 0"}},

	// docs/quickstart.md, 2: Docker Compose.
	"docker compose up --build":                  {docker: true, background: true},
	"docker compose logs verify":                 {docker: true, retry: 10 * time.Minute, want: verdictClean},
	"docker compose port --index 1 worker 9464":  {docker: true, retry: 5 * time.Minute, want: []string{"127.0.0.1:"}},
	"docker compose run --rm --no-deps verify":   {docker: true, want: verdictClean},
	"docker compose up --build --scale worker=3": {docker: true, background: true, after: threeWorkers},
	"docker compose down -v":                     {docker: true, after: composeDown},
	"make compose-smoke":                         {by: composeSmoke},

	// docs/quickstart.md, 3 and 4: a real broker, the count job, a kill -9,
	// the balance job's own binary.
	"go build -o processor ./cmd/processor": {run: true},
	"B=$(scripts/kafka start)":              {broker: true, by: []ref{ciStep("addr=$(WEIR_KAFKA_PROXIED_LISTENERS=3 scripts/kafka start)")}},
	"./processor generate --brokers $B --topic numbers --records 20000 --keys 100 --partitions 4 --create": {run: true,
		want: []string{"wrote 20000 count records"}},
	"./processor generate --brokers $B --topic counts --records 0 --partitions 4 --create": {run: true,
		want: []string{"ready, no records written"}},
	"./processor run --brokers $B --job count --input numbers --output counts --checkpoints file:///tmp/weir-checkpoints &": {run: true},
	"./processor verify --brokers $B --job count --input numbers --output counts --wait 60s": {run: true,
		want: []string{"duplicates 0, missing 0, wrong sums 0"}},
	"curl -sf http://127.0.0.1:9464/readyz": {run: true, retry: time.Minute, want: []string{"ok"}},
	"curl -s http://127.0.0.1:9464/metrics | grep -E '^weir_(tasks_assigned|checkpoints_completed_total)'": {run: true,
		retry: 30 * time.Second, want: []string{"weir_tasks_assigned{", "weir_checkpoints_completed_total{"}},
	"./processor checkpoints list --checkpoints file:///tmp/weir-checkpoints --name count": {run: true,
		want: []string{"SOURCE POSITIONS", "*"}},
	"./processor checkpoints inspect --checkpoints file:///tmp/weir-checkpoints --name count --task 0 --id latest": {run: true,
		want: []string{"task 0 (the newest of", "operators"}},
	"kill -9 %1": {run: true},
	"./processor generate --brokers $B --topic numbers --records 20000 --from 20000 --keys 100": {run: true,
		want: []string{"wrote 20000 count records to"}},
	"go build -o balance ./examples/balance/cmd/balance": {run: true},
	"./processor generate --brokers $B --job balance --topic transfers --records 50000 --keys 50 --partitions 4 --create": {run: true,
		want: []string{"wrote 50000 balance records"}},
	"./processor generate --brokers $B --topic balances --records 0 --partitions 4 --create": {run: true,
		want: []string{"ready, no records written"}},
	"./balance --brokers $B --input transfers --output balances --checkpoints file:///tmp/weir-checkpoints &": {run: true},
	"./processor verify --brokers $B --job balance --input transfers --output balances --wait 60s": {run: true,
		want: []string{"duplicates 0, missing 0, wrong balances 0"}},
	"docker build --target job --build-arg JOB_MAIN=./examples/balance/cmd/balance -t weir-balance .": {docker: true, once: true},
	"kill %2 %3":         {run: true},
	"wait":               {run: true},
	"scripts/kafka stop": {by: []ref{ciStep("scripts/kafka stop")}},
	"rm -rf /tmp/weir-checkpoints": {run: true, after: func(s *session) error {
		if _, err := os.Stat(filepath.Join(s.dir, "weir-checkpoints")); !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("the checkpoints are still there: %v", err)
		}
		return nil
	}},

	// README.md: the tests and scripts/kafka.
	"make test":           {by: []ref{ciStep("make test")}},
	"scripts/kafka start": {by: []ref{ciStep("addr=$(WEIR_KAFKA_PROXIED_LISTENERS=3 scripts/kafka start)")}},
	"KAFKA_BROKERS=$(scripts/kafka start) make integration": {by: []ref{
		ciStep("KAFKA_BROKERS=$addr go test -race -count=1 -v ./integration/..."),
		ciStep("KAFKA_BROKERS=$addr go test -race -count=1 ./source/... ./sink/..."),
	}},
	// With WEIR_KAFKA_DIR in the session's directory, where no broker runs.
	"scripts/kafka status": {run: true, exit: 3, want: []string{"stopped"}},

	// docs/benchmarks.md: the Nexmark benchmark, minutes long; its harness
	// runs small in TestNexmarkBench.
	"go build -o kafkabench ./cmd/kafkabench":                       {run: true},
	"B=$(WEIR_KAFKA_DIR=/tmp/weir-kafka-bench scripts/kafka start)": {by: []ref{ciStep("addr=$(WEIR_KAFKA_PROXIED_LISTENERS=3 scripts/kafka start)")}},
	"./kafkabench --brokers $B --nexmark q0,q1,q2,q5,q7,q8 --events 5000000 --processor ./processor": {by: []ref{
		{file: "integration/nexmarkbench_test.go", text: "func TestNexmarkBench(", name: "TestNexmarkBench"}}},
	"WEIR_KAFKA_DIR=/tmp/weir-kafka-bench scripts/kafka stop": {by: []ref{ciStep("scripts/kafka stop")}},
	"go run ./bench --brokers $B --records 5000000 --svg docs/images/bench.svg": {by: []ref{
		{file: "bench/bench_test.go", text: "func TestBench(", name: "TestBench"}}},
	"go run ./bench --brokers $B --systems weir,kstreams --records 0 --latency-for 0 --restore-mb 1000": {by: []ref{
		{file: "bench/bench_test.go", text: "func TestBench(", name: "TestBench"}}},
	"go run ./bench --brokers $B --systems passthrough,weir,flink,kstreams,kstreams@100ms": {by: []ref{
		{file: "bench/bench_test.go", text: "func TestBench(", name: "TestBench"}}},
	"go run ./bench --brokers $B --records 0 --restore-mb 0 --latency-intervals 1s,100ms,50ms": {by: []ref{
		{file: "bench/bench_test.go", text: "func TestBench(", name: "TestBench"}}},
	"go run ./bench --brokers $B --systems passthrough,weir,flink,flink-heap,kstreams": {by: []ref{
		{file: "bench/bench_test.go", text: "func TestBench(", name: "TestBench"}}},
	"go run ./bench --brokers $B --partitions 64": {by: []ref{
		{file: "bench/bench_test.go", text: "func TestBench(", name: "TestBench"}}},
	"go run ./bench --brokers $B --records 0 --latency-for 0 --restore-mb 0 --quota-bytes 150000 --latency-rate 20000": {by: []ref{
		{file: "bench/bench_test.go", text: "func TestBench(", name: "TestBench"}}},

	// docs/operating.md and docs/writing-jobs.md.
	"go run -tags weirfaults ./cmd/processor chaos --duration 30m": {by: []ref{
		ciStep(`go build -tags weirfaults -o "$WEIR_KAFKA_DIR/processor" ./cmd/processor`),
		ciStep(`"$WEIR_KAFKA_DIR/processor" chaos --brokers "$addr" --kafka-dir "$WEIR_KAFKA_DIR" --duration 3m`),
		{file: "cmd/processor/chaos_test.go", text: "func TestChaosRun(", name: "TestChaosRun"}}},
	"go run ./cmd/processor run --job orders --topic orders=shop.orders,payments=shop.payments": {by: []ref{
		{file: "integration/orders_test.go", text: "func TestOrdersAcrossWorkers(", name: "TestOrdersAcrossWorkers"}}},
	"go run ./cmd/processor run -h":            {run: true, once: true, want: []string{"-txn-timeout", "WEIR_SOME_FLAG"}},
	"docker build -t weir .":                   {docker: true, once: true},
	"go run ./examples/balance/cmd/balance -h": {run: true, once: true, want: []string{"-txn-timeout", "-state-memtable-size"}},

	// examples/balance/README.md: the balance job on a broker; its worker
	// runs in the foreground until Ctrl-C.
	"go run ./cmd/processor generate --brokers $B --job balance --topic transfers --records 100000 --keys 50 --partitions 4 --create": {run: true,
		want: []string{"wrote 100000 balance records"}},
	"go run ./cmd/processor generate --brokers $B --topic balances --records 0 --partitions 4 --create": {run: true,
		want: []string{"ready, no records written"}},
	"go run ./examples/balance/cmd/balance --brokers $B --input transfers --output balances": {run: true, untilCaughtUp: true},
	"go run ./cmd/processor verify --brokers $B --job balance --input transfers --output balances": {run: true,
		want: []string{"duplicates 0, missing 0, wrong balances 0"}},
}

// threeWorkers waits until compose runs a third worker.
func threeWorkers(s *session) error {
	return s.retry(5*time.Minute, func() error {
		_, _, err := s.run(s.ctx, []string{"docker", "compose", "port", "--index", "3", "worker", "9464"}, 0)
		return err
	})
}

// composeDown lets the docker compose up commands end with their stack.
func composeDown(s *session) error {
	s.stopForeground(time.Minute)
	return nil
}

// docFiles are the pages whose commands the test runs, in the order it runs
// them: the quick start first, since the other pages repeat some of its
// commands (marked once).
func docFiles(t *testing.T, root string) []string {
	var files []string
	for _, pattern := range []string{"docs/*.md", "README.md", "examples/*/README.md"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			rel, _ := filepath.Rel(root, f)
			files = append(files, filepath.ToSlash(rel))
		}
	}
	first := "docs/quickstart.md"
	slices.SortStableFunc(files, func(a, b string) int {
		switch {
		case a == first:
			return -1
		case b == first:
			return 1
		}
		return 0
	})
	return files
}

func repoRoot(t testing.TB) string {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root: %v", err)
	}
	return root
}
