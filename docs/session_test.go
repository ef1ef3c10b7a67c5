package docs

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weirstream/weir/internal/testcluster"
)

// session runs the commands of one page: see TestDocCommands for what it
// substitutes.
type session struct {
	t       *testing.T
	ctx     context.Context
	root    string
	dir     string // stands in for /tmp; TMPDIR of every command
	docker  dockerProbe
	brokers string            // $B, once the page started a broker
	names   map[string]string // topic and job names as written -> unique
	bins    map[string]string // ./X -> the binary go build -o X built
	jobs    []*job            // background jobs, %1 first
	fg      []*job            // foreground commands left running (docker compose up)
	tags    []string          // docker images built
	project string            // COMPOSE_PROJECT_NAME
}

func newSession(t *testing.T, root, file string, d dockerProbe) *session {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	s := &session{t: t, ctx: ctx, root: root, dir: t.TempDir(), docker: d,
		names: map[string]string{}, bins: map[string]string{}}
	s.project = testcluster.UniqueName(t, "weir-docs")
	t.Cleanup(func() {
		for _, j := range append(s.jobs, s.fg...) {
			j.stop(syscall.SIGKILL)
		}
		if s.docker.used {
			_, _, _ = s.run(context.Background(), []string{"docker", "compose", "down", "-v"}, 0)
		}
		for _, tag := range s.tags {
			_, _, _ = s.run(context.Background(), []string{"docker", "image", "rm", "-f", tag}, 0)
		}
		cancel()
	})
	return s
}

// step runs one command of the page as h says.
func (s *session) step(c docCommand, h how) {
	t := s.t
	t.Helper()
	where := fmt.Sprintf("%s:%d", c.file, c.line)
	if err := s.jobsAlive(); err != nil {
		t.Fatalf("%s: before %s: %v", where, c.text, err)
	}
	switch {
	case h.broker:
		s.brokers = strings.Join(testcluster.Kafka(t).Brokers, ",")
		t.Logf("%s: %s: $B = %s (scripts/kafka start runs in .ci/run)", where, c.text, s.brokers)
		return
	case h.docker && s.docker.err != nil:
		t.Logf("%s: %s: not run: no Docker engine (%v)", where, c.text, s.docker.err)
		return
	case !h.run && !h.docker:
		t.Logf("%s: %s: %s", where, c.text, h.describe())
		return
	}
	s.docker.used = s.docker.used || h.docker
	ws, err := splitWords(c.text)
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	start := time.Now()
	err = s.exec(c, h, ws)
	if err == nil && h.after != nil {
		err = h.after(s)
	}
	if err != nil {
		t.Fatalf("%s: %s: %v", where, c.text, err)
	}
	t.Logf("%s: %s: ok (%v)", where, c.text, time.Since(start).Round(time.Millisecond))
}

func (s *session) exec(c docCommand, h how, ws []word) error {
	args := values(ws)
	switch {
	case args[0] == "kill":
		return s.kill(args[1:])
	case args[0] == "wait" && len(args) == 1:
		return s.waitJobs()
	case ws[len(ws)-1].op && args[len(args)-1] == "&":
		j, err := s.start(c.text, s.rewrite(args[:len(args)-1]))
		if err == nil {
			s.jobs = append(s.jobs, j)
		}
		return err
	case h.background:
		j, err := s.start(c.text, s.rewrite(args))
		if err == nil {
			s.fg = append(s.fg, j)
		}
		return err
	case h.untilCaughtUp:
		return s.runUntilCaughtUp(c.text, s.rewrite(args))
	}
	argv := s.rewrite(args)
	for _, w := range ws {
		if w.op {
			// A pipeline: sh runs it, with every word quoted again.
			line := make([]string, len(ws))
			for i, w := range ws {
				line[i] = w.val
				if !w.op {
					line[i] = shellQuote(argv[i])
				}
			}
			argv = []string{"bash", "-o", "pipefail", "-c", strings.Join(line, " ")}
			break
		}
	}
	return s.retry(h.retry, func() error {
		out, code, err := s.run(s.ctx, argv, 3*time.Minute)
		switch {
		case err != nil && code < 0:
			return err
		case code != h.exit:
			return fmt.Errorf("%s: exit code %d, want %d:\n%s", strings.Join(argv, " "), code, h.exit, tail(out))
		}
		for _, w := range h.want {
			if !strings.Contains(out, w) {
				return fmt.Errorf("%s: output lacks %q:\n%s", strings.Join(argv, " "), w, tail(out))
			}
		}
		return nil
	})
}

// rewrite applies the session's substitutions to a command's words.
func (s *session) rewrite(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.Contains(a, "$B") {
			if s.brokers == "" {
				s.t.Fatalf("%q uses $B before the page set it with B=$(scripts/kafka start)", strings.Join(args, " "))
			}
			a = strings.ReplaceAll(a, "$B", s.brokers)
		}
		a = strings.ReplaceAll(a, "/tmp/weir-", s.dir+"/weir-")
		if strings.Contains(a, "127.0.0.1:9464") {
			a = strings.ReplaceAll(a, "127.0.0.1:9464", s.statusAddr())
		}
		if i > 0 {
			switch args[i-1] {
			case "--topic", "--input", "--output", "--dead-letter", "--name":
				a = s.unique(a)
			case "-o":
				if args[0] == "go" {
					a = filepath.Join(s.dir, a)
					s.bins["./"+args[i]] = a
				}
			case "-t":
				if args[0] == "docker" {
					a = s.unique(a)
					s.tags = append(s.tags, a)
				}
			}
		}
		if b, ok := s.bins[a]; ok && i == 0 {
			a = b
		}
		out[i] = a
	}
	return out
}

// unique is the session's name for a topic or job instance the docs name.
func (s *session) unique(name string) string {
	if u, ok := s.names[name]; ok {
		return u
	}
	u := testcluster.UniqueName(s.t, "docs-"+name)
	s.names[name] = u
	return u
}

// env is the environment of a command: the caller's without its WEIR_
// variables and TMPDIR, plus the session's.
func (s *session) env(argv []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WEIR_") && !strings.HasPrefix(kv, "TMPDIR=") && !strings.HasPrefix(kv, "COMPOSE_PROJECT_NAME=") {
			env = append(env, kv)
		}
	}
	return append(env, "TMPDIR="+s.dir, "WEIR_KAFKA_DIR="+filepath.Join(s.dir, "kafka"),
		"COMPOSE_PROJECT_NAME="+s.project, "WEIR_NAME="+s.unique(jobName(argv)))
}

// jobName is the job instance name a worker command runs under: --name,
// else --job, else the job of its binary (processor: count).
func jobName(argv []string) string {
	for _, f := range []string{"--name", "--job"} {
		for i := 1; i < len(argv); i++ {
			if argv[i-1] == f {
				return argv[i]
			}
		}
	}
	prog := argv[0]
	if prog == "go" && len(argv) > 2 && argv[1] == "run" {
		prog = argv[2]
	}
	if base := path.Base(prog); base != "processor" && base != "go" {
		return base
	}
	return "count"
}

// run runs argv from the repository root and returns its combined output
// and exit code (-1 if it did not run or was killed).
func (s *session) run(ctx context.Context, argv []string, timeout time.Duration) (string, int, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	cmd := s.command(ctx, argv)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := -1
	if cmd.ProcessState != nil {
		code = cmd.ProcessState.ExitCode()
	}
	if ctx.Err() != nil {
		return out.String(), -1, fmt.Errorf("%s: %w:\n%s", strings.Join(argv, " "), ctx.Err(), tail(out.String()))
	}
	if code < 0 && err != nil {
		return out.String(), code, fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
	}
	return out.String(), code, nil
}

// command makes argv a process of its own group, as a shell with job
// control would, so that signals reach its children (go run's program);
// the end of ctx kills the group.
func (s *session) command(ctx context.Context, argv []string) *exec.Cmd {
	name := argv[0]
	if name == "go" {
		name = goBinary()
	}
	cmd := exec.CommandContext(ctx, name, argv[1:]...)
	cmd.Dir = s.root
	cmd.Env = s.env(argv)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	return cmd
}

func (s *session) retry(d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select { // pacing between attempts, not synchronisation
		case <-s.ctx.Done():
			return fmt.Errorf("%w; last attempt: %w", s.ctx.Err(), err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// dockerProbe says whether Docker commands can run here.
type dockerProbe struct {
	err  error // nil: docker info and docker compose version succeed
	used bool
}

func probeDocker() dockerProbe {
	for _, argv := range [][]string{{"docker", "info"}, {"docker", "compose", "version"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
		cancel()
		if err != nil {
			return dockerProbe{err: fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, lastLine(string(out)))}
		}
	}
	return dockerProbe{}
}

func goBinary() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

func shellQuote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n'\"\\$`|&;<>()*?[]{}#~!") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// tail is the end of a command's output, for error messages.
func tail(s string) string {
	const n = 4000
	if len(s) > n {
		return "...\n" + s[len(s)-n:]
	}
	return s
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
