package integration

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// This file runs the processor binary as real OS processes, so that tests
// can kill -9, stop and continue them: what a crash, a long GC pause or a
// network partition does to a worker.

var (
	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
)

func TestMain(m *testing.M) {
	// Re-executed as the compose smoke test's stand-in for MinIO's mc.
	if dir := os.Getenv(mcStandInEnv); dir != "" {
		os.Exit(mcStandIn(dir, os.Args[1:], os.Stdout, os.Stderr))
	}
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// processorBinary builds ./cmd/processor once per test binary and returns
// its path. WEIR_PROCESSOR_RACE=1 builds it with the race detector (slower:
// CI's two cores run two workers, the broker and the test);
// WEIR_PROCESSOR_BIN names a binary to use instead of building one.
func processorBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if bin := os.Getenv("WEIR_PROCESSOR_BIN"); bin != "" {
			buildBin, buildErr = filepath.Abs(bin)
			return
		}
		root, err := filepath.Abs("..")
		if err != nil {
			buildErr = err
			return
		}
		if buildDir, buildErr = os.MkdirTemp("", "weir-processor-"); buildErr != nil {
			return
		}
		buildBin = filepath.Join(buildDir, "processor")
		args := []string{"build", "-o", buildBin}
		if os.Getenv("WEIR_PROCESSOR_RACE") == "1" {
			args = append(args, "-race")
		}
		args = append(args, "./cmd/processor")
		gobin, err := exec.LookPath("go")
		if err != nil {
			gobin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
		}
		cmd := exec.Command(gobin, args...)
		cmd.Dir = root
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
			return
		}
		fmt.Fprintf(os.Stderr, "built %s in %v\n", buildBin, time.Since(start).Round(time.Millisecond))
	})
	if buildErr != nil {
		t.Fatalf("build the processor: %v", buildErr)
	}
	return buildBin
}

// procs starts processor processes for one test and owns them: every
// process is killed (by pid) when the test ends, and on failure the output
// of each is printed and kept in a log directory.
type procs struct {
	t      *testing.T
	bin    string
	logDir string
	n      int
	env    []string // KEY=VALUE added to (and overriding) the test's environment
}

func newProcs(t *testing.T) *procs {
	t.Helper()
	bin := processorBinary(t)
	dir, err := os.MkdirTemp("", "weir-"+sanitizeName(t.Name())+"-")
	if err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs after every process's cleanup.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("process logs kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	return &procs{t: t, bin: bin, logDir: dir}
}

func sanitizeName(s string) string {
	return regexp.MustCompile(`[^a-zA-Z0-9_.-]+`).ReplaceAllString(s, "_")
}

// proc is one running processor process. Its stdout and stderr go to one
// pipe, which a goroutine copies line by line into a log file and into
// memory, where tests wait for lines and hook actions to them.
type proc struct {
	t       *testing.T
	name    string
	cmd     *exec.Cmd
	logPath string
	started time.Time

	mu      sync.Mutex
	lines   []string
	hooks   []*hook
	changed chan struct{} // closed and replaced when a line arrives or the output ends
	eof     bool

	exited  chan struct{} // closed once the process is reaped
	exitErr error         // valid after exited
}

type hook struct {
	match func(line string) bool
	do    func(line string) // runs on the reader goroutine, before the next line is read
}

// start runs `processor args...` as a process called name (for logs).
func (ps *procs) start(name string, args ...string) *proc {
	ps.t.Helper()
	return ps.startCmd(name, append(os.Environ(), ps.env...), ps.bin, args...)
}

// startCmd runs bin with args and exactly the environment env.
func (ps *procs) startCmd(name string, env []string, bin string, args ...string) *proc {
	t := ps.t
	t.Helper()
	ps.n++
	logPath := filepath.Join(ps.logDir, fmt.Sprintf("%02d-%s.log", ps.n, sanitizeName(name)))
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.Env = env
	p := &proc{t: t, name: name, cmd: cmd, logPath: logPath, changed: make(chan struct{}), exited: make(chan struct{})}
	fmt.Fprintf(logFile, "# %s %s\n", bin, strings.Join(args, " "))
	p.started = time.Now()
	if err := cmd.Start(); err != nil {
		pw.Close()
		pr.Close()
		logFile.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	pw.Close() // the child holds the write end; EOF once it (and any child of it) exits
	t.Logf("started %s: pid %d: %s %s", name, cmd.Process.Pid, filepath.Base(bin), strings.Join(args, " "))

	read := make(chan struct{})
	go func() {
		defer close(read)
		defer logFile.Close()
		defer pr.Close()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			p.line(sc.Text(), logFile)
		}
		p.mu.Lock()
		p.eof = true
		close(p.changed)
		p.changed = make(chan struct{})
		p.mu.Unlock()
	}()
	go func() {
		err := cmd.Wait()
		<-read
		p.exitErr = err
		close(p.exited)
	}()
	t.Cleanup(func() {
		if !p.Exited() {
			_ = cmd.Process.Signal(syscall.SIGKILL) // by pid; also ends a stopped process
		}
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			t.Errorf("%s (pid %d) did not go away 30s after SIGKILL", name, cmd.Process.Pid)
		}
		if t.Failed() {
			p.dump(80)
		}
	})
	return p
}

func (p *proc) line(s string, logFile *os.File) {
	fmt.Fprintln(logFile, s)
	p.mu.Lock()
	p.lines = append(p.lines, s)
	var due []*hook
	kept := p.hooks[:0]
	for _, h := range p.hooks {
		if h.match(s) {
			due = append(due, h)
		} else {
			kept = append(kept, h)
		}
	}
	p.hooks = kept
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	for _, h := range due {
		h.do(s)
	}
}

// dump logs the last n lines of the process's output and where the rest is.
func (p *proc) dump(n int) {
	p.mu.Lock()
	lines := p.lines[max(0, len(p.lines)-n):]
	total := len(p.lines)
	p.mu.Unlock()
	p.t.Logf("--- %s (pid %d, %s): last %d of %d lines (all in %s):\n%s",
		p.name, p.cmd.Process.Pid, p.state(), len(lines), total, p.logPath, strings.Join(lines, "\n"))
}

func (p *proc) state() string {
	if !p.Exited() {
		return "running"
	}
	if p.exitErr == nil {
		return "exited 0"
	}
	return p.exitErr.Error()
}

// Pid is the process id.
func (p *proc) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended.
func (p *proc) Exited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// ExitErr waits up to d for the process to end and returns its exit error
// (nil for exit 0); it fails the test if it does not end.
func (p *proc) ExitErr(d time.Duration) error {
	p.t.Helper()
	select {
	case <-p.exited:
		return p.exitErr
	case <-time.After(d):
		p.t.Fatalf("%s (pid %d) still runs after %v", p.name, p.Pid(), d)
		return nil
	}
}

// Signal sends sig to the process, by pid.
func (p *proc) Signal(sig syscall.Signal) {
	p.t.Helper()
	// ErrProcessDone: reaped already, its exit not yet noted (Exited).
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) && !p.Exited() {
		p.t.Fatalf("signal %v to %s (pid %d): %v", sig, p.name, p.Pid(), err)
	}
}

// Kill9 kills the process with SIGKILL and waits until it is reaped.
func (p *proc) Kill9() {
	p.t.Helper()
	p.Signal(syscall.SIGKILL)
	if err := p.ExitErr(30 * time.Second); err == nil {
		p.t.Logf("%s (pid %d) exited 0 before SIGKILL reached it", p.name, p.Pid())
	}
}

// Terminate asks the process to stop (SIGTERM: final checkpoint, commit,
// exit 0) and returns its exit error. After d it kills it and says so.
func (p *proc) Terminate(d time.Duration) (err error, graceful bool) {
	p.t.Helper()
	if p.Exited() {
		return p.exitErr, false
	}
	// A process that has logged has installed its signal handlers (the
	// processor does so first thing); a SIGTERM before that would kill a
	// just-restarted worker with the default action.
	ctx, cancel := context.WithTimeout(context.Background(), d)
	_, _, _ = p.WaitLine(ctx, 0, func(l string) bool { return strings.Contains(l, "level=") })
	cancel()
	p.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return p.exitErr, true
	case <-time.After(d):
		p.t.Errorf("%s (pid %d) did not exit within %v of SIGTERM; killing it", p.name, p.Pid(), d)
		p.Kill9()
		return p.exitErr, false
	}
}

// OnLine runs do once, on the reader goroutine, for the first line from now
// on that matches. do runs before the next line is read, which is as close
// to the moment the process wrote the line as a test gets.
func (p *proc) OnLine(match func(string) bool, do func(string)) {
	p.mu.Lock()
	p.hooks = append(p.hooks, &hook{match: match, do: do})
	p.mu.Unlock()
}

// Lines returns the output lines read so far.
func (p *proc) Lines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

// errOutputEnded says the process ended without writing the awaited line.
var errOutputEnded = errors.New("process output ended")

// WaitLine waits for a line at index from or later that matches and
// returns its index and text.
func (p *proc) WaitLine(ctx context.Context, from int, match func(string) bool) (int, string, error) {
	for {
		p.mu.Lock()
		for i := from; i < len(p.lines); i++ {
			if match(p.lines[i]) {
				s := p.lines[i]
				p.mu.Unlock()
				return i, s, nil
			}
		}
		from = len(p.lines)
		ch, eof := p.changed, p.eof
		p.mu.Unlock()
		if eof {
			return 0, "", fmt.Errorf("%s: %w (%s)", p.name, errOutputEnded, p.state())
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, "", fmt.Errorf("%s: waiting for a log line: %w", p.name, context.Cause(ctx))
		}
	}
}

// --- log lines ---------------------------------------------------------------

// logAttr returns the value of attribute key in a log/slog line, in the
// text handler's form (key=value, key="quoted value") or the JSON
// handler's ("key":value).
func logAttr(line, key string) (string, bool) {
	for _, pre := range []string{" " + key + "=", key + "="} {
		i := strings.Index(line, pre)
		if i < 0 || pre[0] != ' ' && i != 0 {
			continue
		}
		rest := line[i+len(pre):]
		if strings.HasPrefix(rest, `"`) {
			q, err := strconv.QuotedPrefix(rest)
			if err != nil {
				return "", false
			}
			v, _ := strconv.Unquote(q)
			return v, true
		}
		if j := strings.IndexByte(rest, ' '); j >= 0 {
			rest = rest[:j]
		}
		return rest, true
	}
	pre := `"` + key + `":`
	i := strings.Index(line, pre)
	if i < 0 {
		return "", false
	}
	rest := strings.TrimLeft(line[i+len(pre):], " ")
	if strings.HasPrefix(rest, `"`) {
		q, err := strconv.QuotedPrefix(rest)
		if err != nil {
			return "", false
		}
		v, _ := strconv.Unquote(q)
		return v, true
	}
	if j := strings.IndexAny(rest, ",}"); j >= 0 {
		rest = rest[:j]
	}
	return strings.TrimSpace(rest), true
}

// logMsg is the message of a slog line.
func logMsg(line string) string {
	m, _ := logAttr(line, "msg")
	return m
}

// logInt is an integer attribute of a slog line, -1 if absent.
func logInt(line, key string) int64 {
	v, ok := logAttr(line, key)
	if !ok {
		return -1
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// isMsg matches lines with message msg and, when task >= 0, that task.
func isMsg(msg string, task int) func(string) bool {
	return func(line string) bool {
		return logMsg(line) == msg && (task < 0 || logInt(line, "task") == int64(task))
	}
}

// Messages the engine logs (internal/engine/, checkpoint/): tests wait for them.
const (
	msgCheckpointComplete = "checkpoint complete"
	msgRestoring          = "restoring"
	msgWalkBack           = "checkpoint is not valid: its transactions were aborted, walking back"
	msgZombieManifest     = "skipping a zombie's manifest"
)
