package engine

import (
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
)

func TestWatermarkGen(t *testing.T) {
	t0 := time.Unix(1000, 0)
	splits := []checkpoint.SourcePosition{{Topic: "a", Partition: 0}, {Topic: "a", Partition: 1}}
	g := newWatermarkGen(100*time.Millisecond, 5*time.Second, splits, t0)
	rec := func(part int32, ts int64, at time.Time) {
		g.observe(&Position{Topic: "a", Partition: part, Timestamp: ts}, at)
	}
	expect := func(at time.Time, want wmark, changed bool) {
		t.Helper()
		got, ok := g.advance(at)
		if ok != changed || ok && got != want {
			t.Fatalf("advance at %v = %+v, %v; want %+v, %v", at.Sub(t0), got, ok, want, changed)
		}
	}
	rec(0, 5000, t0)
	// Partition 1 has had no record: it holds the watermark back.
	expect(t0, wmark{}, false)
	rec(1, 3000, t0)
	expect(t0, wmark{ts: 3000 - 100 - 1}, true)
	expect(t0, wmark{}, false) // unchanged: nothing sent
	rec(1, 2000, t0)           // out of order: no step back
	expect(t0, wmark{}, false)
	rec(1, 9000, t0.Add(time.Second))
	expect(t0.Add(time.Second), wmark{ts: 5000 - 101}, true)
	// Partition 0 goes quiet past the idleness: left out.
	expect(t0.Add(5*time.Second), wmark{ts: 9000 - 101}, true)
	// Both quiet: idle, at the last watermark.
	expect(t0.Add(6*time.Second), wmark{ts: 9000 - 101, idle: true}, true)
	expect(t0.Add(7*time.Second), wmark{}, false)
	// A record wakes partition 0; its watermark is lower, which holds the
	// output where it was rather than moving it back.
	rec(0, 6000, t0.Add(8*time.Second))
	expect(t0.Add(8*time.Second), wmark{ts: 9000 - 101}, true)

	// The checkpoint keeps each split's highest timestamp; a source that
	// restores it starts from it.
	ps := []checkpoint.SourcePosition{{Topic: "a", Partition: 0}, {Topic: "a", Partition: 1}}
	g.annotate(ps)
	if ps[0].MaxTimestamp == nil || *ps[0].MaxTimestamp != 6000 || *ps[1].MaxTimestamp != 9000 {
		t.Fatalf("annotated positions %+v", ps)
	}
	r := newWatermarkGen(100*time.Millisecond, 0, ps, t0)
	if got, ok := r.advance(t0); !ok || got != (wmark{ts: 6000 - 101}) {
		t.Fatalf("restored watermark %+v %v, want %d", got, ok, 6000-101)
	}
}

func TestInputWatermarks(t *testing.T) {
	w := newInputWatermarks(2)
	step := func(i int, x wmark, want wmark, changed bool) {
		t.Helper()
		got, ok := w.update(i, x)
		if ok != changed || ok && got != want {
			t.Fatalf("update(%d, %+v) = %+v, %v; want %+v, %v", i, x, got, ok, want, changed)
		}
	}
	step(0, wmark{ts: 100}, wmark{}, false) // input 1 has said nothing
	step(1, wmark{ts: 50}, wmark{ts: 50}, true)
	step(1, wmark{ts: 150}, wmark{ts: 100}, true)
	step(1, wmark{ts: 120}, wmark{}, false) // an input never goes back
	step(0, wmark{ts: 90, idle: true}, wmark{ts: 150}, true)
	step(1, wmark{ts: 150, idle: true}, wmark{ts: 150, idle: true}, true)
	step(0, wmark{ts: 200}, wmark{ts: 200}, true)
	step(1, wmark{ts: endOfTime}, wmark{}, false)
	step(0, wmark{ts: endOfTime}, wmark{ts: endOfTime}, true)
}

// TestRestoredWatermarkGoesFirst: a restored source sends the watermark it
// had sent before the checkpoint, even when a split had no record then (it
// holds the watermark back again until it is idle), and never less.
func TestRestoredWatermarkGoesFirst(t *testing.T) {
	t0 := time.Unix(1000, 0)
	max := int64(6000)
	ps := []checkpoint.SourcePosition{{Topic: "a", MaxTimestamp: &max}, {Topic: "b"}}
	g := newWatermarkGen(0, time.Second, ps, t0)
	g.out = wmark{ts: 5999} // what the source's ack held
	if w, ok := g.advance(t0); !ok || w != (wmark{ts: 5999}) {
		t.Fatalf("first watermark after restore %+v %v, want 5999", w, ok)
	}
	// b still has no record: no advance, whatever a does.
	g.observe(&Position{Topic: "a", Timestamp: 7000}, t0)
	if w, ok := g.advance(t0); ok {
		t.Fatalf("watermark %+v with split b silent", w)
	}
	g.observe(&Position{Topic: "a", Timestamp: 7000}, t0.Add(time.Second))
	if w, ok := g.advance(t0.Add(time.Second)); !ok || w != (wmark{ts: 6999}) {
		t.Fatalf("after b's idleness: %+v %v, want 6999", w, ok)
	}
}
