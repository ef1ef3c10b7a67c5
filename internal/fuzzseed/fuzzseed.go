// Package fuzzseed adds the seeds of a fuzz target and keeps them as its
// committed corpus. Seeds run with plain go test; with
// WEIR_WRITE_FUZZ_SEEDS=1 they are also written under the package's
// testdata/fuzz/<target>/, where they stay: the valid ones freeze what
// today's encoders write, so that a later change of a format still has to
// read it (old checkpoints stay in storage).
package fuzzseed

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Seed is one seed of a fuzz target: the name of its corpus file and its
// arguments, in the target's order.
type Seed struct {
	Name string
	Args []any
}

// Add adds seeds to f, and writes them as corpus files if
// WEIR_WRITE_FUZZ_SEEDS is 1.
func Add(f *testing.F, seeds []Seed) {
	f.Helper()
	write := os.Getenv("WEIR_WRITE_FUZZ_SEEDS") == "1"
	dir := filepath.Join("testdata", "fuzz", f.Name())
	for _, s := range seeds {
		f.Add(s.Args...)
		if !write {
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			f.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, s.Name), File(s.Args...), 0o644); err != nil {
			f.Fatal(err)
		}
	}
}

// File is args in the "go test fuzz v1" corpus format.
func File(args ...any) []byte {
	b := []byte("go test fuzz v1\n")
	for _, a := range args {
		switch v := a.(type) {
		case []byte:
			b = fmt.Appendf(b, "[]byte(%q)\n", v)
		case string:
			b = fmt.Appendf(b, "string(%q)\n", v)
		default:
			b = fmt.Appendf(b, "%T(%v)\n", v, v)
		}
	}
	return b
}
