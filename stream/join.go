package stream

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/weirstream/weir/state"
)

// Joins of two keyed streams in event time, built on CoProcess: both
// streams must be keyed alike (for Kafka, co-partitioned topics, read by
// one task), and the operator aligns checkpoint barriers across both, so a
// checkpoint holds both sides' buffers at one consistent cut. Each side's
// records wait in keyed map state until the watermark (the least of both
// inputs') says no record of the other side can match them any more; an
// event-time timer then removes them. Records that come at or behind the
// watermark are late and dropped, as in Flink's joins, and counted
// (weir_late_records_dropped_total) and logged.

// seqKey orders buffered records by event time, then by arrival.
type seqKey struct{ TS, Seq int64 }

type seqKeyCodec struct{}

func (seqKeyCodec) Append(dst []byte, k seqKey) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(k.TS)^1<<63)
	return binary.BigEndian.AppendUint64(dst, uint64(k.Seq))
}

func (seqKeyCodec) Decode(b []byte) (seqKey, error) {
	if len(b) != 16 {
		return seqKey{}, fmt.Errorf("join buffer key of %d bytes, want 16", len(b))
	}
	return seqKey{TS: int64(binary.BigEndian.Uint64(b) ^ 1<<63), Seq: int64(binary.BigEndian.Uint64(b[8:]))}, nil
}

// sequence numbers buffered records in arrival order. It starts from the
// clock, so that a restored task's numbers mostly follow those of the
// attempts before it; but a clock that runs behind an earlier owner's (a
// worker minutes off, or stepped back) can start inside the numbers they
// used, so putNew checks each number against the buffer.
type sequence struct{ next int64 }

// seqClock seeds sequences; a test sets it to an earlier owner's clock.
var seqClock = time.Now

func newSequence() *sequence { return &sequence{next: seqClock().UnixNano()} }

func (s *sequence) take() int64 { s.next++; return s.next }

// putNew buffers v at ts under a sequence number no buffered record of the
// key has: one an earlier attempt of the task used is skipped, where a Put
// would overwrite, and so silently drop, the record buffered under it.
func putNew[V any](m *state.Map[seqKey, V], seq *sequence, ts int64, v V) error {
	for {
		k := seqKey{ts, seq.take()}
		_, taken, err := m.Get(k)
		if err != nil {
			return err
		}
		if !taken {
			return m.Put(k, v)
		}
	}
}

// buffers declares a join's keyed buffers of both sides, in event time order.
func buffers[A, B any](s *Setup, ca state.Codec[A], cb state.Codec[B]) (*state.Map[seqKey, A], *state.Map[seqKey, B], error) {
	left, err := MapState(s, "left", state.Codec[seqKey](seqKeyCodec{}), ca)
	if err != nil {
		return nil, nil, err
	}
	right, err := MapState(s, "right", state.Codec[seqKey](seqKeyCodec{}), cb)
	return left, right, err
}

func late[K, Out any](ctx *Context[K, Out], ts int64) bool {
	wm := ctx.Watermark()
	return !wm.IsZero() && ts <= wm.UnixMilli()
}

// IntervalJoin joins each record a of one stream with each record b of the
// other with the same key whose event time is within [a + lower, a +
// upper] (lower may be negative), as Flink's interval join. A joined
// record carries the later of the two event times.
func IntervalJoin[K, A, B, Out any](a KeyedStream[K, A], b KeyedStream[K, B], name string, lower, upper time.Duration,
	ca state.Codec[A], cb state.Codec[B], join func(key K, a A, b B) (Out, error)) Stream[Out] {
	lo, hi := lower.Milliseconds(), upper.Milliseconds()
	return CoProcess(a, b, name, func(s *Setup) (CoProcessor[K, A, B, Out], error) {
		if lo > hi {
			return CoProcessor[K, A, B, Out]{}, fmt.Errorf("interval join %q: lower bound %v above upper bound %v", name, lower, upper)
		}
		if join == nil {
			return CoProcessor[K, A, B, Out]{}, fmt.Errorf("interval join %q: join function is nil", name)
		}
		left, right, err := buffers(s, ca, cb)
		if err != nil {
			return CoProcessor[K, A, B, Out]{}, err
		}
		seq := newSequence()
		emit := func(ctx *Context[K, Out], x A, y B, ta, tb int64) error {
			out, err := join(ctx.Key(), x, y)
			if err != nil {
				return err
			}
			return ctx.EmitAt(out, time.UnixMilli(max(ta, tb)))
		}
		return CoProcessor[K, A, B, Out]{
			Process1: func(ctx *Context[K, Out], x A) error {
				ta := ctx.Timestamp().UnixMilli()
				if late(ctx, ta) {
					ctx.DropLate()
					return nil
				}
				err := right.Range(func(k seqKey, y B) error {
					if k.TS >= ta+lo && k.TS <= ta+hi {
						return emit(ctx, x, y, ta, k.TS)
					}
					return nil
				})
				if err != nil {
					return err
				}
				if err := putNew(left, seq, ta, x); err != nil {
					return err
				}
				// No b after the watermark passes ta+upper can match.
				return ctx.RegisterEventTimer(time.UnixMilli(ta + hi))
			},
			Process2: func(ctx *Context[K, Out], y B) error {
				tb := ctx.Timestamp().UnixMilli()
				if late(ctx, tb) {
					ctx.DropLate()
					return nil
				}
				err := left.Range(func(k seqKey, x A) error {
					if tb >= k.TS+lo && tb <= k.TS+hi {
						return emit(ctx, x, y, k.TS, tb)
					}
					return nil
				})
				if err != nil {
					return err
				}
				if err := putNew(right, seq, tb, y); err != nil {
					return err
				}
				// No a after the watermark passes tb-lower can match.
				return ctx.RegisterEventTimer(time.UnixMilli(tb - lo))
			},
			OnEventTimer: func(ctx *Context[K, Out], _ time.Time) error {
				wm := ctx.Watermark().UnixMilli()
				if err := evict(left, func(ts int64) bool { return ts+hi <= wm }); err != nil {
					return err
				}
				return evict(right, func(ts int64) bool { return ts-lo <= wm })
			},
		}, nil
	})
}

// evict deletes the entries of m whose time gone says is past.
func evict[V any](m *state.Map[seqKey, V], gone func(ts int64) bool) error {
	var old []seqKey
	err := m.Range(func(k seqKey, _ V) error {
		if gone(k.TS) {
			old = append(old, k)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, k := range old {
		if err := m.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// WindowJoin joins the records of two streams with the same key that fall
// in the same window (tumbling or sliding): when the window fires, join
// gets each pair of its records, one from each side, as Flink's window
// join. Joined records carry the window's event time, End-1.
func WindowJoin[K, A, B, Out any](a KeyedStream[K, A], b KeyedStream[K, B], name string, w WindowAssigner,
	ca state.Codec[A], cb state.Codec[B], join func(key K, w Window, a A, b B) (Out, error)) Stream[Out] {
	return CoProcess(a, b, name, func(s *Setup) (CoProcessor[K, A, B, Out], error) {
		if err := w.Err(true); err != nil {
			return CoProcessor[K, A, B, Out]{}, fmt.Errorf("window join %q: %w", name, err)
		}
		if join == nil {
			return CoProcessor[K, A, B, Out]{}, errors.New("window join: join function is nil")
		}
		// Buffered per window: the key is (window start, sequence), and
		// a timer at its end finds it by the size.
		s.Describe("window", w.Layout())
		left, right, err := buffers(s, ca, cb)
		if err != nil {
			return CoProcessor[K, A, B, Out]{}, err
		}
		seq := newSequence()
		size := w.Size().Milliseconds()
		add := func(ctx *Context[K, Out], put func(start int64) error) error {
			added := false
			for _, win := range w.Windows(ctx.Timestamp()) {
				end := win.End.UnixMilli()
				if late(ctx, end-1) {
					continue // the window has fired
				}
				added = true
				if err := put(win.Start.UnixMilli()); err != nil {
					return err
				}
				if err := ctx.RegisterEventTimer(time.UnixMilli(end - 1)); err != nil {
					return err
				}
			}
			if !added {
				ctx.DropLate() // every window of it has fired
			}
			return nil
		}
		return CoProcessor[K, A, B, Out]{
			Process1: func(ctx *Context[K, Out], x A) error {
				return add(ctx, func(start int64) error { return putNew(left, seq, start, x) })
			},
			Process2: func(ctx *Context[K, Out], y B) error {
				return add(ctx, func(start int64) error { return putNew(right, seq, start, y) })
			},
			OnEventTimer: func(ctx *Context[K, Out], ts time.Time) error {
				start := ts.UnixMilli() + 1 - size
				win := Window{Start: time.UnixMilli(start), End: time.UnixMilli(start + size)}
				var xs []A
				var ks []seqKey
				err := left.Range(func(k seqKey, x A) error {
					if k.TS == start {
						xs = append(xs, x)
						ks = append(ks, k)
					}
					return nil
				})
				if err != nil {
					return err
				}
				var kr []seqKey
				err = right.Range(func(k seqKey, y B) error {
					if k.TS != start {
						return nil
					}
					kr = append(kr, k)
					for _, x := range xs {
						out, err := join(ctx.Key(), win, x, y)
						if err != nil {
							return err
						}
						if err := ctx.Emit(out); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					return err
				}
				for _, k := range ks {
					if err := left.Delete(k); err != nil {
						return err
					}
				}
				for _, k := range kr {
					if err := right.Delete(k); err != nil {
						return err
					}
				}
				return nil
			},
		}, nil
	})
}
