package main

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestDiskFaultsOnlyInTestBuilds: no package of weir imports the disk
// fault harness outside its tests, except the processor built with the
// weirfaults tag: a test hook never reaches a production binary.
func TestDiskFaultsOnlyInTestBuilds(t *testing.T) {
	const harness = "github.com/weirstream/weir/internal/diskfault"
	importers := func(tags ...string) []string {
		t.Helper()
		args := append([]string{"list"}, tags...)
		args = append(args, "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "github.com/weirstream/weir/...")
		out, err := exec.Command("go", args...).Output()
		if err != nil {
			t.Fatalf("go %s: %v", strings.Join(args, " "), err)
		}
		var found []string
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			pkg, imports, _ := strings.Cut(line, " ")
			for _, imp := range strings.Fields(imports) {
				if imp == harness {
					found = append(found, pkg)
				}
			}
		}
		return found
	}
	if got := importers(); len(got) > 0 {
		t.Errorf("without the weirfaults tag, %v import %s", got, harness)
	}
	if got := importers("-tags", "weirfaults"); len(got) != 1 || got[0] != "github.com/weirstream/weir/cmd/processor" {
		t.Errorf("with the weirfaults tag, %v import %s, want cmd/processor alone", got, harness)
	}
}

// TestChaosDiskFaultsNeedTestBuild: a production build leaves the disk
// faults out of the default faults, and refuses them when asked.
func TestChaosDiskFaultsNeedTestBuild(t *testing.T) {
	hook := stateFaults
	stateFaults = nil
	defer func() { stateFaults = hook }()
	none := func(string) (string, bool) { return "", false }
	c, err := parseChaos([]string{"--brokers", "127.0.0.1:9092", "--kafka-dir", t.TempDir()}, none, &bytes.Buffer{})
	if err != nil || slices.Contains(c.Faults, "disk-full") || slices.Contains(c.Faults, "disk-errors") || !slices.Contains(c.Faults, "sigkill") {
		t.Errorf("default faults of a production build: %v, %v; want all but the disk faults", c.Faults, err)
	}
	_, err = parseChaos([]string{"--brokers", "127.0.0.1:9092", "--faults", "sigkill,disk-full"}, none, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "-tags weirfaults") {
		t.Errorf("disk-full in a production build: %v, want an error naming -tags weirfaults", err)
	}
}
