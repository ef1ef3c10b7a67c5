package engine

import "github.com/weirstream/weir/state"

// prefetchGroup is how many records a keyed operator keys, and has its
// backend prefetch the state of, before it processes them. The misses of a
// group overlap; a group is small enough that its lines are still cached
// when its records are processed.
const prefetchGroup = 32

// keyGroup holds the keys of up to prefetchGroup records, computed once:
// typed for the Context, encoded back to back for the backend and the
// scope. Its buffers are reused from group to group.
type keyGroup[K any] struct {
	keys []K
	flat []byte
	ends []int
}

// prefetchBatch is collectBatch for a backend that prefetches: per group
// of records it computes the keys, has the backend load their state, then
// processes the records.
func (o *keyedOp[K, In, Out]) prefetchBatch(pf state.Prefetcher, vals []In, pos []Position) error {
	g := &o.group
	for len(vals) > 0 {
		n := o.encodeKeys(vals[:min(len(vals), prefetchGroup)])
		if n == 0 {
			// The first record's key function panicked: apply it the
			// ordinary way, which turns the panic into its RecordError.
			*o.cursor = pos[0]
			if err := o.collect(vals[0]); err != nil {
				return err
			}
			vals, pos = vals[1:], pos[1:]
			continue
		}
		pf.Prefetch(g.flat, g.ends[:n])
		start := 0
		for i, end := range g.ends[:n] {
			*o.cursor = pos[i]
			if err := o.applyKeyed(g.keys[i], g.flat[start:end:end], vals[i]); err != nil {
				return o.recordErr(err)
			}
			start = end
		}
		vals, pos = vals[n:], pos[n:]
	}
	return nil
}

// encodeKeys keys vals into o.group up to the first record whose key
// function or codec panics, and returns how many it keyed.
func (o *keyedOp[K, In, Out]) encodeKeys(vals []In) (n int) {
	g := &o.group
	g.keys, g.flat, g.ends = g.keys[:0], g.flat[:0], g.ends[:0]
	defer func() {
		if recover() != nil {
			n = len(g.ends)
		}
	}()
	for _, v := range vals {
		k := o.keyFn(v)
		g.flat = o.codec.Append(g.flat, k)
		g.keys = append(g.keys, k)
		g.ends = append(g.ends, len(g.flat))
	}
	return len(g.ends)
}

// applyKeyed processes v, whose key k encodes as key.
func (o *keyedOp[K, In, Out]) applyKeyed(k K, key []byte, v In) (err error) {
	defer o.recoverTo(&err)
	if ok, err := checkKey(&o.keyedState, &o.guard, key, k); !ok {
		return err
	}
	o.scope.Set(key)
	o.ctx.key = k
	return o.proc.Process(&o.ctx, v)
}
