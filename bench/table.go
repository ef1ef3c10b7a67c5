package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
)

// writeTable prints each system's median run (by records/s) of those that
// passed the check, with the range, and ratios to the passthrough and to
// weir.
func writeTable(w io.Writer, c config, res []result) {
	fmt.Fprintf(w, "keyed running count: %d records (~100 bytes), %d partitions, %d keys; median of %d runs; steady state (first to last output visible)\n",
		c.records, c.partitions, c.keys, c.runs)
	fmt.Fprintf(w, "%-12s %12s %20s %12s %14s %10s %14s %8s\n", "system", "records/s", "(range)", "cpu s / M", "peak RSS MiB", "total s", "vs passthrough", "vs weir")
	med := map[string]result{}
	for _, s := range c.systems {
		var ok []result
		for _, r := range res {
			if r.system != s {
				continue
			}
			if r.check != nil {
				fmt.Fprintf(w, "%-12s run failed the check: %v\n", s, r.check)
				continue
			}
			ok = append(ok, r)
		}
		if len(ok) == 0 {
			continue
		}
		slices.SortFunc(ok, func(a, b result) int { return cmp.Compare(a.perSecond(), b.perSecond()) })
		med[s] = ok[len(ok)/2]
	}
	ratio := func(r result, base string) string {
		b, ok := med[base]
		if !ok {
			return "-"
		}
		return fmt.Sprintf("%.2f", r.perSecond()/b.perSecond())
	}
	for _, s := range c.systems {
		r, ok := med[s]
		if !ok {
			fmt.Fprintf(w, "%-12s no run passed\n", s)
			continue
		}
		var lo, hi float64
		for _, x := range res {
			if x.system == s && x.check == nil {
				if lo == 0 || x.perSecond() < lo {
					lo = x.perSecond()
				}
				hi = max(hi, x.perSecond())
			}
		}
		fmt.Fprintf(w, "%-12s %12.0f %20s %12.2f %14d %10.2f %14s %8s\n", s, r.perSecond(), fmt.Sprintf("%.0f-%.0f", lo, hi),
			r.cpuPerMillion(), r.rss>>20, r.total.Seconds(), ratio(r, "passthrough"), ratio(r, "weir"))
	}
}
