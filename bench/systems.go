package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// kinds are what --systems may name, with what each runs.
var kinds = []string{"passthrough", "weir", "weir-b", "flink", "flink-heap", "kstreams"}

// isWeir tells weir and weir-b, which run the same way but for their
// binary and flags, from the rest.
func isWeir(kind string) bool { return kind == "weir" || kind == "weir-b" }

// A system is one entry of --systems: a kind of system and the checkpoint
// interval (weir, Flink) or commit interval (Kafka Streams) it runs at.
type system struct {
	name     string        // as the tables show it: the kind, or kind@interval
	kind     string        // one of kinds
	interval time.Duration // 0 for the passthrough, which has none
	pinned   bool          // the entry named its interval (kind@interval)
}

// slug is the system's name as it goes into topic names, Kafka Streams
// application ids and directories, which take no '@'.
func (s system) slug() string { return strings.ReplaceAll(s.name, "@", "-") }

// at is s at interval d, named kind@d.
func (s system) at(d time.Duration) system {
	return system{name: s.kind + "@" + d.String(), kind: s.kind, interval: d, pinned: true}
}

// intervalText is the interval as a table shows it, "-" for none.
func (s system) intervalText() string {
	if s.interval == 0 {
		return "-"
	}
	return s.interval.String()
}

// parseSystems reads --systems: comma-separated kinds, each optionally
// with @INTERVAL (a Go duration, at least 1ms) overriding def for it, so
// that one run can show a system at two intervals: "kstreams,kstreams@100ms".
// The passthrough takes no interval; the same kind at the same interval
// twice is an error.
func parseSystems(list string, def time.Duration) ([]system, error) {
	var out []system
	for entry := range strings.SplitSeq(list, ",") {
		entry = strings.TrimSpace(entry)
		kind, at, pinned := strings.Cut(entry, "@")
		if !slices.Contains(kinds, kind) {
			return nil, fmt.Errorf("--systems: unknown system %q (want one of %s, optionally @INTERVAL)", entry, strings.Join(kinds, ", "))
		}
		s := system{name: kind, kind: kind, interval: def}
		switch {
		case kind == "passthrough" && pinned:
			return nil, fmt.Errorf("--systems: %q: the passthrough has no interval", entry)
		case kind == "passthrough":
			s.interval = 0
		case pinned:
			d, err := time.ParseDuration(at)
			if err != nil || d < time.Millisecond {
				return nil, fmt.Errorf("--systems: %q: want SYSTEM@INTERVAL with an interval of at least 1ms, like kstreams@100ms", entry)
			}
			s = s.at(d)
		}
		if slices.ContainsFunc(out, func(o system) bool { return o.kind == s.kind && o.interval == s.interval }) {
			return nil, fmt.Errorf("--systems: %q runs a system already named at the same interval", entry)
		}
		out = append(out, s)
	}
	return out, nil
}

// parseIntervals reads --latency-intervals: comma-separated Go durations,
// each at least 1ms; none for an empty list.
func parseIntervals(list string) ([]time.Duration, error) {
	var out []time.Duration
	for f := range strings.SplitSeq(list, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		d, err := time.ParseDuration(f)
		if err != nil || d < time.Millisecond {
			return nil, fmt.Errorf("--latency-intervals: %q is not an interval of at least 1ms", f)
		}
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out, nil
}

// latencyPlan is what the latency runs run: each system of systems at
// each of intervals (at def if there are none), except the passthrough,
// once, and a system whose entry named its interval, at that one only; no
// kind twice at one interval.
func latencyPlan(systems []system, intervals []time.Duration, def time.Duration) []system {
	if len(intervals) == 0 {
		intervals = []time.Duration{def}
	}
	var out []system
	add := func(s system) {
		if !slices.ContainsFunc(out, func(o system) bool { return o.kind == s.kind && o.interval == s.interval }) {
			out = append(out, s)
		}
	}
	for _, s := range systems {
		switch {
		case s.kind == "passthrough" || s.pinned:
			add(s)
		default:
			for _, d := range intervals {
				add(s.at(d))
			}
		}
	}
	return out
}
