package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"time"
)

// writeTable prints each system's median run (by records/s) of those that
// passed the check, with the range, and ratios to the passthrough and to
// weir.
func writeTable(w io.Writer, c config, res []result) {
	fmt.Fprintf(w, "keyed running count: %d records (~100 bytes), %d partitions, %d keys; median of %d runs; steady state (first to last output visible)\n",
		c.records, c.partitions, c.keys, c.runs)
	if c.passthroughBytes > 0 {
		fmt.Fprintf(w, "the passthrough pads each value it writes to %d bytes (--passthrough-value-bytes)\n", c.passthroughBytes)
	}
	fmt.Fprintf(w, "%-16s %9s %12s %20s %12s %14s %10s %14s %8s\n", "system", "interval", "records/s", "(range)", "cpu s / M", "peak RSS MiB", "total s", "vs passthrough", "vs weir")
	for _, r := range res {
		switch {
		case r.err != nil:
			fmt.Fprintf(w, "%-16s run failed: %v\n", r.system.name, r.err)
		case r.check != nil:
			fmt.Fprintf(w, "%-16s run failed the check: %v\n", r.system.name, r.check)
		}
	}
	med := map[string]result{}
	for _, r := range medians(c, res) {
		med[r.system.name] = r
	}
	ratio := func(r result, base string) string {
		b, ok := med[base]
		if !ok {
			return "-"
		}
		return fmt.Sprintf("%.2f", r.perSecond()/b.perSecond())
	}
	for _, s := range c.systems {
		r, ok := med[s.name]
		if !ok {
			fmt.Fprintf(w, "%-16s %9s no run passed\n", s.name, s.intervalText())
			continue
		}
		var lo, hi float64
		for _, x := range res {
			if x.system.name == s.name && x.ok() {
				if lo == 0 || x.perSecond() < lo {
					lo = x.perSecond()
				}
				hi = max(hi, x.perSecond())
			}
		}
		fmt.Fprintf(w, "%-16s %9s %12.0f %20s %12.2f %14d %10.2f %14s %8s\n", s.name, s.intervalText(), r.perSecond(), fmt.Sprintf("%.0f-%.0f", lo, hi),
			r.cpuPerMillion(), r.rss>>20, r.total.Seconds(), ratio(r, "passthrough"), ratio(r, weirBase(c, r.system)))
	}
}

// weirBase is the system the "vs weir" column divides s by: weir (at the
// default interval), or for weir-b the weir at its own interval if the run
// has one, which makes the column the ratio of the two builds or settings.
func weirBase(c config, s system) string {
	if s.kind == "weir-b" {
		for _, o := range c.systems {
			if o.kind == "weir" && o.interval == s.interval {
				return o.name
			}
		}
	}
	return "weir"
}

// writeCores prints, for each system's median run, where the machine's
// CPU went per million records: the system's process, the broker's (if
// config.brokerPID names it) and the harness's own, which reads and
// counts the output. On a machine they share, a system's rate is the
// cores over the sum.
func writeCores(w io.Writer, c config, res []result) {
	med := medians(c, res)
	if len(med) == 0 {
		return
	}
	fmt.Fprintf(w, "CPU s per million records in the steady state, median runs\n")
	fmt.Fprintf(w, "%-16s %9s %10s %10s %10s %10s\n", "system", "interval", "system", "broker", "harness", "all")
	for _, r := range med {
		sys, harness := r.cpuPerMillion(), perMillion(r.harnessCPU, r.records)
		broker, all := "-", "-"
		if c.brokerPID > 0 {
			b := perMillion(r.brokerCPU, r.records)
			broker, all = fmt.Sprintf("%.2f", b), fmt.Sprintf("%.2f", sys+b+harness)
		}
		fmt.Fprintf(w, "%-16s %9s %10.2f %10s %10.2f %10s\n", r.system.name, r.system.intervalText(), sys, broker, harness, all)
	}
}

// writeSVG draws the median runs' records/s and CPU seconds per million
// records as two bar charts side by side.
func writeSVG(w io.Writer, c config, res []result) error {
	med := medians(c, res)
	const barH, gap, left, width, top = 26, 10, 110, 300, 48
	n := len(med)
	h := top + n*(barH+gap) + 30
	var maxRate, maxCPU float64
	for _, r := range med {
		maxRate = max(maxRate, r.perSecond())
		maxCPU = max(maxCPU, r.cpuPerMillion())
	}
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="13">`+"\n", 2*(left+width)+60, h)
	p(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	p(`<text x="10" y="20" font-size="15">Keyed running count, %d records, %d partitions, exactly-once (median of %d)</text>`+"\n", c.records, c.partitions, c.runs)
	charts := []struct {
		title string
		x0    int
		val   func(result) float64
		most  float64
		unit  string
	}{
		{"records/s (higher is better)", 0, result.perSecond, maxRate, "%.0f"},
		{"CPU s per million records (lower is better)", left + width + 40, result.cpuPerMillion, maxCPU, "%.2f"},
	}
	for _, ch := range charts {
		p(`<text x="%d" y="40">%s</text>`+"\n", ch.x0+10, ch.title)
		for i, r := range med {
			y := top + i*(barH+gap)
			bw := 0.0
			if ch.most > 0 {
				bw = ch.val(r) / ch.most * width
			}
			color := "#8a8f98"
			if isWeir(r.system.kind) {
				color = "#2b6cb0"
			}
			p(`<text x="%d" y="%d">%s</text>`+"\n", ch.x0+10, y+barH-8, r.system.name)
			p(`<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", ch.x0+left, y, bw, barH, color)
			p(`<text x="%.1f" y="%d">`+ch.unit+`</text>`+"\n", float64(ch.x0+left)+bw+4, y+barH-8, ch.val(r))
		}
	}
	p("</svg>\n")
	return nil
}

// medians are the median run of each system that passed the check, in
// the order of c.systems.
func medians(c config, res []result) []result {
	var out []result
	for _, s := range c.systems {
		var ok []result
		for _, r := range res {
			if r.system.name == s.name && r.ok() {
				ok = append(ok, r)
			}
		}
		if len(ok) == 0 {
			continue
		}
		slices.SortFunc(ok, func(a, b result) int { return cmp.Compare(a.perSecond(), b.perSecond()) })
		out = append(out, ok[len(ok)/2])
	}
	return out
}

// writeLatency prints each system's latency run at each interval.
func writeLatency(w io.Writer, c config, lats []latency) {
	fmt.Fprintf(w, "end-to-end latency at %d records/s for %v from %v past each system's first result, %d partitions (write to read_committed visibility)\n",
		c.latRate, c.latFor, c.latWarmup, c.partitions)
	fmt.Fprintf(w, "%-12s %9s %10s %10s %10s %9s %13s\n", "system", "interval", "p50 ms", "p99 ms", "max ms", "samples", "exactly-once")
	var notes []string
	for _, l := range lats {
		if l.err != nil {
			fmt.Fprintf(w, "%-12s %9s run failed: %v\n", l.system.kind, l.system.intervalText(), l.err)
			continue
		}
		once := "yes"
		if l.check != nil {
			once = "NO"
			notes = append(notes, fmt.Sprintf("%s at %s: %v", l.system.kind, l.system.intervalText(), l.check))
		}
		fmt.Fprintf(w, "%-12s %9s %10.1f %10.1f %10.1f %9d %13s\n", l.system.kind, l.system.intervalText(), ms(l.p50), ms(l.p99), ms(l.max), l.samples, once)
	}
	for _, n := range notes {
		fmt.Fprintf(w, "failed the check: %s\n", n)
	}
	fmt.Fprintln(w)
}

// writeQuota prints each system's checkpoints or commits under the
// producer quota.
func writeQuota(w io.Writer, c config, qs []quotaRun) {
	if len(qs) == 0 {
		return
	}
	fmt.Fprintf(w, "Under a producer quota of %d bytes/s per client (input at %d records/s, %d partitions; each system for %v from its first result visible)\n",
		c.quotaBytes, c.latRate, c.partitions, c.quotaFor)
	fmt.Fprintf(w, "%-16s %9s %11s %9s %9s %9s %9s %7s %10s %13s  %s\n",
		"system", "interval", "of", "done", "p50 ms", "p99 ms", "max ms", "failed", "results/s", "exactly-once", "durations")
	var notes []string
	opt := func(d time.Duration) string {
		if d == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f", ms(d))
	}
	for _, q := range qs {
		if q.err != nil {
			fmt.Fprintf(w, "%-16s %9s run failed: %v\n", q.system.name, q.system.intervalText(), q.err)
			continue
		}
		of := "checkpoints"
		if q.system.kind == "kstreams" {
			of = "commits"
		}
		once := "so far yes"
		if q.check != nil {
			once = "NO"
			notes = append(notes, fmt.Sprintf("%s failed the check: %v", q.system.name, q.check))
		}
		st := q.stats
		if st.untriggered > 0 {
			notes = append(notes, fmt.Sprintf("%s: %d more checkpoints failed to trigger (Flink counts those while its tasks start as failed)", q.system.name, st.untriggered))
		}
		fmt.Fprintf(w, "%-16s %9s %11s %9d %9s %9s %9s %7d %10.0f %13s  %s\n", q.system.name, q.system.intervalText(), of, st.completed,
			opt(st.p50), opt(st.p99), opt(st.max), st.failed, float64(q.results)/q.window.Seconds(), once, st.source)
	}
	for _, n := range notes {
		fmt.Fprintln(w, n)
	}
	fmt.Fprintln(w, "(weir: each task's checkpoints, trigger to durable manifest; Flink: each checkpoint, trigger to its last acknowledgement;\n"+
		" Kafka Streams: each stream thread's commits, its producer's first flush to commitTransaction's return)")
	fmt.Fprintln(w)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// writeRestore prints each system's restore times: median and range of
// the restarts with the local state kept and with it deleted.
func writeRestore(w io.Writer, c config, rests []restore) {
	if len(rests) == 0 {
		return
	}
	fmt.Fprintf(w, "restore after kill -9: %d keys x %d bytes of state; restart to the last probe's result visible, median of %d (range)\n",
		rests[0].keys, restoreValue, c.runs)
	fmt.Fprintf(w, "%-12s %10s %14s %10s %22s %22s\n", "system", "load s", "state MiB", "stored MiB", "local state kept s", "local state deleted s")
	span := func(ds []time.Duration) string {
		if len(ds) == 0 {
			return "-"
		}
		s := slices.Clone(ds)
		slices.Sort(s)
		return fmt.Sprintf("%.1f (%.1f-%.1f)", s[len(s)/2].Seconds(), s[0].Seconds(), s[len(s)-1].Seconds())
	}
	for _, r := range rests {
		if r.check != nil {
			fmt.Fprintf(w, "%-12s failed the check: %v\n", r.system, r.check)
			continue
		}
		stored := "-"
		if r.stored > 0 {
			stored = fmt.Sprint(r.stored >> 20)
		}
		fmt.Fprintf(w, "%-12s %10.1f %14d %10s %22s %22s\n", r.system, r.load.Seconds(), r.disk>>20, stored, span(r.kept), span(r.lost))
	}
	for _, r := range rests {
		if r.keptFetched+r.keptReused+r.lostFetched+r.lostReused > 0 {
			fmt.Fprintf(w, "%s's restores, over the %d restarts of each kind: local state kept: %d MiB downloaded, %d MiB reused; deleted: %d MiB downloaded, %d MiB reused\n",
				r.system, c.runs, r.keptFetched>>20, r.keptReused>>20, r.lostFetched>>20, r.lostReused>>20)
		}
	}
	fmt.Fprintf(w, "(each restart waits out the %v session timeout after the kill first, so that neither waits for the dead member; it is not counted)\n\n", c.restoreSession)
}
