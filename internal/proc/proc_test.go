package proc

import (
	"os"
	"testing"
	"time"
)

// TestSelf reads this process: some CPU time, growing with work, and a
// resident set of at least a megabyte.
func TestSelf(t *testing.T) {
	before, err := CPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); time.Since(start) < 200*time.Millisecond; {
	}
	after, err := CPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after-before < 50*time.Millisecond {
		t.Errorf("200 ms of spinning took %v of CPU", after-before)
	}
	if rss := PeakRSS(os.Getpid()); rss < 1<<20 {
		t.Errorf("peak RSS %d bytes", rss)
	}
	if _, err := CPU(-1); err == nil {
		t.Error("CPU of no process")
	}
}
