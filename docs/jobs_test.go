package docs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The background jobs of a session, and what the shell does with them:
// kill %N, wait, Ctrl-C.

// job is a process started in the background.
type job struct {
	text string
	cmd  *exec.Cmd
	out  syncBuffer
	done chan struct{}
	sig  syscall.Signal // the last signal sent; 0 if none
}

func (s *session) start(text string, argv []string) (*job, error) {
	j := &job{text: text, cmd: s.command(s.ctx, argv), done: make(chan struct{})}
	j.cmd.Stdout, j.cmd.Stderr = &j.out, &j.out
	if err := j.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { // ends with the process, which the session kills at the latest
		_ = j.cmd.Wait()
		close(j.done)
	}()
	return j, nil
}

func (j *job) exited() bool {
	select {
	case <-j.done:
		return true
	default:
		return false
	}
}

func (j *job) stop(sig syscall.Signal) {
	if !j.exited() {
		j.sig = sig
		_ = syscall.Kill(-j.cmd.Process.Pid, sig)
	}
}

// addrLine is the worker's log line that says where its status page is.
var addrLine = regexp.MustCompile(`msg="serving status page and metrics" addr=(\S+)`)

// addr waits for the job's status address.
func (j *job) addr(ctx context.Context) (string, error) {
	for {
		if m := addrLine.FindStringSubmatch(j.out.String()); m != nil {
			return m[1], nil
		}
		if j.exited() {
			return "", fmt.Errorf("%s exited before it served its status page:\n%s", j.text, tail(j.out.String()))
		}
		select { // polling the log: the process gives no other signal
		case <-ctx.Done():
			return "", fmt.Errorf("%s: no status address logged: %w:\n%s", j.text, ctx.Err(), tail(j.out.String()))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// statusAddr is the status address of the session's first background job
// that serves one.
func (s *session) statusAddr() string {
	for _, j := range s.jobs {
		ctx, cancel := context.WithTimeout(s.ctx, time.Minute)
		a, err := j.addr(ctx)
		cancel()
		if err == nil {
			return a
		}
		s.t.Logf("status address: %v", err)
	}
	s.t.Fatalf("no background job of this page serves a status page at 127.0.0.1:9464")
	return ""
}

// jobsAlive fails if a background job ended that nobody stopped.
func (s *session) jobsAlive() error {
	for i, j := range s.jobs {
		if j.exited() && j.sig == 0 {
			return fmt.Errorf("background job %%%d (%s) exited by itself, %v:\n%s", i+1, j.text, j.cmd.ProcessState, tail(j.out.String()))
		}
	}
	return nil
}

// kill does what the shell's kill does with job specs: kill [-9|-SIG] %N...
func (s *session) kill(args []string) error {
	sig := syscall.SIGTERM
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, "%"):
			n, err := strconv.Atoi(a[1:])
			if err != nil || n < 1 || n > len(s.jobs) {
				return fmt.Errorf("kill: no job %s (%d jobs)", a, len(s.jobs))
			}
			s.jobs[n-1].stop(sig)
		case a == "-9" || a == "-KILL":
			sig = syscall.SIGKILL
		case a == "-TERM" || a == "-15":
			sig = syscall.SIGTERM
		case a == "-INT" || a == "-2":
			sig = syscall.SIGINT
		default:
			return fmt.Errorf("kill: %q: this test knows job specs (%%N) and -9, -KILL, -TERM, -INT", a)
		}
	}
	return nil
}

// waitJobs waits for every background job, as the shell's wait does, and
// requires those stopped with SIGTERM or SIGINT to have drained (exit 0).
func (s *session) waitJobs() error {
	var errs []error
	for i, j := range s.jobs {
		if j.sig == 0 {
			errs = append(errs, fmt.Errorf("wait: job %%%d (%s) was never stopped: wait would not return", i+1, j.text))
			continue
		}
		select {
		case <-j.done:
		case <-time.After(90 * time.Second):
			errs = append(errs, fmt.Errorf("wait: job %%%d (%s) still runs 90s after %v:\n%s", i+1, j.text, j.sig, tail(j.out.String())))
			continue
		}
		st := j.cmd.ProcessState
		switch {
		case j.sig == syscall.SIGKILL:
			if ws, ok := st.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
				errs = append(errs, fmt.Errorf("wait: job %%%d (%s) ended with %v after SIGKILL", i+1, j.text, st))
			}
		case st.ExitCode() != 0:
			errs = append(errs, fmt.Errorf("wait: job %%%d (%s) did not drain on %v: %v:\n%s", i+1, j.text, j.sig, st, tail(j.out.String())))
		default:
			s.t.Logf("job %%%d drained on %v and exited 0", i+1, j.sig)
		}
	}
	return errors.Join(errs...)
}

// runUntilCaughtUp runs a worker that the docs run in the foreground and
// stop with Ctrl-C: once every task it runs has checkpointed the end of its
// input (its consumer lag is 0), SIGINT to its process group, as Ctrl-C
// sends it, must drain it with exit code 0.
func (s *session) runUntilCaughtUp(text string, argv []string) error {
	j, err := s.start(text, argv)
	if err != nil {
		return err
	}
	defer j.stop(syscall.SIGKILL)
	ctx, cancel := context.WithTimeout(s.ctx, 3*time.Minute)
	defer cancel()
	addr, err := j.addr(ctx)
	if err != nil {
		return err
	}
	err = s.retry(2*time.Minute, func() error {
		if j.exited() {
			return fmt.Errorf("exited before it caught up, %v:\n%s", j.cmd.ProcessState, tail(j.out.String()))
		}
		return caughtUp(ctx, addr)
	})
	if err != nil {
		return err
	}
	j.stop(syscall.SIGINT)
	select {
	case <-j.done:
	case <-time.After(90 * time.Second):
		return fmt.Errorf("still runs 90s after Ctrl-C (SIGINT):\n%s", tail(j.out.String()))
	}
	code := j.cmd.ProcessState.ExitCode()
	if code == 1 && argv[0] == "go" && argv[1] == "run" && drainedLog.MatchString(j.out.String()) && !exitStatusLine.MatchString(j.out.String()) {
		// go run exits 1 whenever it got the SIGINT itself, whatever its
		// program returned; the program's own failure would show as
		// "exit status N". Its log says it drained.
		return nil
	}
	if code != 0 {
		return fmt.Errorf("exit code %d after Ctrl-C (SIGINT), want 0 (drained):\n%s", code, tail(j.out.String()))
	}
	return nil
}

var (
	drainedLog     = regexp.MustCompile(`msg="left the group"[^\n]*\n[^\n]*msg=stopped `)
	exitStatusLine = regexp.MustCompile(`(?m)^exit status \d+$`)
)

var metricLine = regexp.MustCompile(`^(weir_tasks_assigned|weir_consumer_lag_records)\{[^}]*\} (\S+)$`)

// caughtUp asks a worker's /metrics whether every task it runs has
// checkpointed the end of its input.
func caughtUp(ctx context.Context, addr string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(resp.Body); err != nil {
		return err
	}
	assigned, lagging, series := -1.0, 0, 0
	for _, l := range strings.Split(b.String(), "\n") {
		m := metricLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			return fmt.Errorf("metrics: %q: %v", l, err)
		}
		if m[1] == "weir_tasks_assigned" {
			assigned = v
			continue
		}
		series++
		if v != 0 {
			lagging++
		}
	}
	if assigned <= 0 || series != int(assigned) || lagging > 0 {
		return fmt.Errorf("not caught up: %v tasks assigned, lag reported for %d partitions, %d of them behind", assigned, series, lagging)
	}
	return nil
}

// stopForeground waits for the foreground commands (docker compose up) to
// end, and ends them after d.
func (s *session) stopForeground(d time.Duration) {
	for _, j := range s.fg {
		select {
		case <-j.done:
		case <-time.After(d):
			j.stop(syscall.SIGKILL)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for a process's writes and the test's
// reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
