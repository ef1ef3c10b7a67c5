package docs

import (
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode"

	"github.com/weirstream/weir/internal/cli"
	"github.com/weirstream/weir/worker"
)

// Flags, environment variables and metrics the docs may name besides
// weir's own, each with the file that shows it exists.
var (
	otherFlags = map[string]string{
		"build":     "docker compose up --build",
		"scale":     "docker compose up --scale",
		"index":     "docker compose port --index",
		"rm":        "docker compose run --rm",
		"no-deps":   "docker compose run --no-deps",
		"target":    "docker build --target",
		"build-arg": "docker build --build-arg",
		// kafka-console-consumer.sh's.
		"isolation-level": "kafka-console-consumer.sh --isolation-level",
		// kafka-topics.sh's, in the reset command of an internal topic.
		"bootstrap-server": "kafka-topics.sh --bootstrap-server",
		"delete":           "kafka-topics.sh --delete",
		// kafka-configs.sh's, in bench's quota run and a broker logger's
		// level.
		"alter":          "kafka-configs.sh --alter",
		"add-config":     "kafka-configs.sh --add-config",
		"entity-type":    "kafka-configs.sh --entity-type",
		"entity-default": "kafka-configs.sh --entity-default",
		"entity-name":    "kafka-configs.sh --entity-name",
		// kafka-transactions.sh abort's, to close a transaction a skipped
		// marker left open.
		"partition":    "kafka-transactions.sh abort --partition",
		"start-offset": "kafka-transactions.sh abort --start-offset",
		// DumpLogSegments', reading __transaction_state.
		"transaction-log-decoder": "DumpLogSegments --transaction-log-decoder",
	}
	otherEnv = map[string]string{
		"WEIR_KAFKA_DIR":               "scripts/kafka",
		"WEIR_KAFKA_PROXIED_LISTENERS": "scripts/kafka", // the chaos runner's listeners per worker
		"WEIR_KAFKA_HEAP":              "scripts/kafka", // the broker's JVM heap flags
		"WEIR_S3_ENDPOINT":             "internal/testcluster/s3.go",
		"WEIR_TESTCONTAINERS":          "internal/testcluster/containers.go",
		"WEIR_SOME_FLAG":               "internal/cli/cli.go",    // the pattern, in -h output
		"WEIR_STATE_FAULTS":            "cmd/processor/chaos.go", // a weirfaults test build's hook, not a setting
	}
)

var (
	flagToken   = regexp.MustCompile(`(?:^|[\s(\x60\[])--([a-z][a-z0-9-]*)`)
	envToken    = regexp.MustCompile(`\bWEIR_[A-Z0-9_]*[A-Z0-9]`)
	metricToken = regexp.MustCompile(`\bweir_[a-z0-9_]*[a-z0-9]`)
	helpFlag    = regexp.MustCompile(`(?m)^\s+-([a-z][a-z0-9-]*)`)
	metricDecl  = regexp.MustCompile(`"(weir_[a-z0-9_]+)"`)
)

// TestDocNames: every --flag, WEIR_ variable and weir_ metric the docs name
// exists. Flags and variables are those of processor's commands (as their
// -h lists them), which include every worker setting; metrics are those the
// worker registers.
func TestDocNames(t *testing.T) {
	root := repoRoot(t)
	flags := processorFlags(t, root)
	metrics := workerMetrics(t, root)
	for f, where := range otherFlags {
		flags[f] = where
	}
	for v, file := range otherEnv {
		if b, err := os.ReadFile(filepath.Join(root, file)); err != nil || !strings.Contains(string(b), v) {
			t.Errorf("%s is allowed in the docs as named in %s, which does not name it (%v)", v, file, err)
		}
	}
	for _, f := range docFiles(t, root) {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			at := func(format string, args ...any) {
				t.Errorf("%s:%d: "+format, append([]any{f, i + 1}, args...)...)
			}
			for _, m := range flagToken.FindAllStringSubmatch(line, -1) {
				if _, ok := flags[m[1]]; !ok {
					at("--%s is not a flag of processor run, generate, verify, checkpoints, demo or chaos, nor of kafkabench or bench (nor a known other tool's)", m[1])
				}
			}
			for _, v := range envToken.FindAllString(line, -1) {
				if _, ok := flags[cli.FlagOf(v)]; !ok && otherEnv[v] == "" {
					at("%s names no flag (--%s)", v, cli.FlagOf(v))
				}
			}
			for _, m := range metricToken.FindAllString(line, -1) {
				if !metrics.has(m) {
					at("metric %s is not one the worker registers", m)
				}
			}
		}
	}
}

// TestDocSettingsFiles: every ```yaml block of the docs is a valid settings
// file of `run --config`.
func TestDocSettingsFiles(t *testing.T) {
	root := repoRoot(t)
	n := 0
	for _, f := range docFiles(t, root) {
		for _, b := range fencedBlocks(t, filepath.Join(root, f), "yaml") {
			n++
			file := filepath.Join(t.TempDir(), "weir.yaml")
			if err := os.WriteFile(file, []byte(b.text), 0o644); err != nil {
				t.Fatal(err)
			}
			none := func(string) (string, bool) { return "", false }
			if _, err := worker.Parse([]string{"--config", file}, none, io.Discard); err != nil {
				t.Errorf("%s:%d: the settings file is not valid: %v", f, b.line, err)
			}
		}
	}
	if n == 0 {
		t.Error("no ```yaml settings file in the docs: docs/operating.md shows one")
	}
}

// TestDocLinks: every relative link of the docs leads to a file, and every
// #anchor into a Markdown file to one of its headings.
func TestDocLinks(t *testing.T) {
	root := repoRoot(t)
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, f := range docFiles(t, root) {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				if file == "" {
					file = path.Base(f)
				}
				p := path.Join(path.Dir(f), file)
				if _, err := os.Stat(filepath.Join(root, p)); err != nil {
					t.Errorf("%s:%d: link %s: %v", f, i+1, target, err)
					continue
				}
				if anchor != "" && strings.HasSuffix(p, ".md") && !slices.Contains(headingSlugs(t, filepath.Join(root, p)), anchor) {
					t.Errorf("%s:%d: link %s: %s has no heading #%s (has %v)", f, i+1, target, p, anchor, headingSlugs(t, filepath.Join(root, p)))
				}
			}
		}
	}
}

var (
	flagsOnce sync.Once
	flagsSeen map[string]string
	flagsErr  string
)

// processorFlags are the flags of every processor command and of the
// benchmark harnesses, from -h.
func processorFlags(t *testing.T, root string) map[string]string {
	flagsOnce.Do(func() {
		bin := filepath.Join(os.TempDir(), "weir-docs-processor-"+strings.ReplaceAll(t.Name(), "/", "-"))
		defer os.Remove(bin)
		build := exec.Command(goBinary(), "build", "-o", bin, "./cmd/processor")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			flagsErr = "go build ./cmd/processor: " + err.Error() + "\n" + string(out)
			return
		}
		flagsSeen = map[string]string{}
		for _, args := range [][]string{{"run"}, {"generate"}, {"verify"}, {"demo"}, {"chaos"}, {"checkpoints", "list"}, {"checkpoints", "inspect"}, {"checkpoints", "record"}, {"checkpoints", "holds"}, {"checkpoints", "release"}} {
			cmd := exec.Command(bin, append(args, "-h")...)
			cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
			out, err := cmd.CombinedOutput()
			if err != nil {
				flagsErr = "processor " + strings.Join(args, " ") + " -h: " + err.Error() + "\n" + string(out)
				return
			}
			for _, m := range helpFlag.FindAllStringSubmatch(string(out), -1) {
				flagsSeen[m[1]] = "processor " + strings.Join(args, " ")
			}
		}
		// The benchmark harnesses of docs/benchmarks.md.
		for _, pkg := range []string{"./cmd/kafkabench", "./bench"} {
			hb := bin + "-" + path.Base(pkg)
			defer os.Remove(hb)
			build = exec.Command(goBinary(), "build", "-o", hb, pkg)
			build.Dir = root
			if out, err := build.CombinedOutput(); err != nil {
				flagsErr = "go build " + pkg + ": " + err.Error() + "\n" + string(out)
				return
			}
			out, _ := exec.Command(hb, "-h").CombinedOutput() // -h exits 0 or 2 by Go version; the list is what counts
			for _, m := range helpFlag.FindAllStringSubmatch(string(out), -1) {
				if _, ok := flagsSeen[m[1]]; !ok {
					flagsSeen[m[1]] = path.Base(pkg)
				}
			}
		}
	})
	if flagsErr != "" {
		t.Fatal(flagsErr)
	}
	if _, ok := flagsSeen["txn-timeout"]; !ok {
		t.Fatalf("processor run -h lists no --txn-timeout: cannot read the flags (%d found)", len(flagsSeen))
	}
	if _, ok := flagsSeen["nexmark"]; !ok {
		t.Fatalf("kafkabench -h lists no --nexmark: cannot read its flags")
	}
	if _, ok := flagsSeen["svg"]; !ok {
		t.Fatalf("bench -h lists no --svg: cannot read its flags")
	}
	return maps.Clone(flagsSeen)
}

// metricNames are the worker's metric names and the prefix of franz-go's.
type metricNames map[string]bool

func (m metricNames) has(name string) bool {
	if m[name] || name == "weir_kgo" || strings.HasPrefix(name, "weir_kgo_") {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && m[base] {
			return true
		}
	}
	return false
}

func workerMetrics(t *testing.T, root string) metricNames {
	files, err := filepath.Glob(filepath.Join(root, "worker", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	names := metricNames{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range metricDecl.FindAllStringSubmatch(string(b), -1) {
			names[m[1]] = true
		}
	}
	if !names["weir_checkpoints_completed_total"] {
		t.Fatalf("found no weir_checkpoints_completed_total among the worker's metric names %v", names)
	}
	return names
}

type block struct {
	line int
	text string
}

// fencedBlocks returns the fenced blocks of a Markdown file whose info
// string is info.
func fencedBlocks(t *testing.T, file, info string) []block {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []block
	var cur *block
	for i, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && trimmed == "```"+info:
			cur = &block{line: i + 2}
		case cur != nil && trimmed == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += line + "\n"
		}
	}
	return out
}

// headingSlugs are the anchors GitHub gives a Markdown file's headings.
func headingSlugs(t *testing.T, file string) []string {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var slugs []string
	fence := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
			continue
		}
		h := strings.TrimLeft(line, "#")
		if fence || h == line || !strings.HasPrefix(h, " ") {
			continue
		}
		var s strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(h)) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				s.WriteRune(r)
			case r == ' ':
				s.WriteRune('-')
			}
		}
		slugs = append(slugs, s.String())
	}
	return slugs
}
