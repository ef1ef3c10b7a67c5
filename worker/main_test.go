package worker

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCommand: a job's own main takes cmd/processor's command lines (an
// optional leading "run") and answers `probe URL` for container
// healthchecks, with the exit codes Main documents.
func TestCommand(t *testing.T) {
	ready := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !ready {
			http.Error(w, "2 of 3 tasks restored", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	noEnv := func(string) (string, bool) { return "", false }

	for _, tc := range []struct {
		args  []string
		ready bool
		code  int
		out   string
	}{
		{[]string{"run", "-h"}, true, 0, "-session-timeout"},
		{[]string{"-h"}, true, 0, "-session-timeout"},
		{[]string{"run", "--interval", "0s"}, true, 2, "--interval"},
		{[]string{"run", "run"}, true, 2, "run"},
		{[]string{"probe", srv.URL + "/readyz"}, true, 0, "200 OK ok"},
		{[]string{"probe", srv.URL + "/readyz"}, false, 1, "503 Service Unavailable"},
		{[]string{"probe"}, true, 2, "probe: want one URL"},
		{[]string{"probe", "http://127.0.0.1:1/readyz"}, true, 1, "probe:"},
	} {
		ready = tc.ready
		var out strings.Builder
		code := Command(context.Background(), nil, tc.args, noEnv, &out)
		if code != tc.code || !strings.Contains(out.String(), tc.out) {
			t.Errorf("Command(%q) = %d, output:\n%s\nwant %d and %q", tc.args, code, out.String(), tc.code, tc.out)
		}
	}
}

// TestMemoryLimit reads cgroup memory limits as v2 and v1 write them.
func TestMemoryLimit(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		files []string
		want  int64
	}{
		{[]string{file("v2", "536870912\n")}, 536870912},
		{[]string{file("v2max", "max\n")}, 0},
		{[]string{file("v1none", "9223372036854771712\n")}, 0},
		{[]string{filepath.Join(dir, "absent"), file("v1", "1073741824\n")}, 1073741824},
		{[]string{filepath.Join(dir, "absent")}, 0},
	} {
		if got := memoryLimit(tc.files...); got != tc.want {
			t.Errorf("memoryLimit(%v) = %d, want %d", tc.files, got, tc.want)
		}
	}
}
