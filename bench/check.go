package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// checker checks a count job's output: for key k<j>, the records with
// that key are j, j+keys, j+2·keys, ... in order, so its c-th result must
// be count c with sum c·j + keys·c·(c-1)/2, and each c must come once.
type checker struct {
	raw   bool // the passthrough's copies: counted, not checked
	keys  int
	n     atomic.Int64
	mu    sync.Mutex
	count [][]bool // per key, counts seen (index c-1)
	bad   []string
	dups  int
}

func newChecker(keys int) *checker { return &checker{keys: keys, count: make([][]bool, keys)} }

func (c *checker) seen() int64 { return c.n.Load() }

type out struct {
	Key   string `json:"key"`
	Count int64  `json:"count"`
	Sum   int64  `json:"sum"`
}

func (c *checker) take(r *kgo.Record) {
	c.n.Add(1)
	if c.raw {
		return
	}
	o, err := parseOut(r.Value)
	c.mu.Lock()
	defer c.mu.Unlock()
	note := func(format string, args ...any) {
		if len(c.bad) < 5 {
			c.bad = append(c.bad, fmt.Sprintf("%s/%d@%d: ", r.Topic, r.Partition, r.Offset)+fmt.Sprintf(format, args...))
		}
	}
	if err != nil {
		note("%v: %q", err, r.Value)
		return
	}
	j, err := strconv.Atoi(o.Key[min(1, len(o.Key)):])
	if err != nil || len(o.Key) < 2 || o.Key[0] != 'k' || j < 0 || j >= c.keys || !bytes.Equal(r.Key, []byte(o.Key)) {
		note("key %q (record key %q)", o.Key, r.Key)
		return
	}
	if o.Count < 1 {
		note("count %d", o.Count)
		return
	}
	if want := o.Count*int64(j) + int64(c.keys)*o.Count*(o.Count-1)/2; o.Sum != want {
		note("key %s count %d: sum %d, want %d", o.Key, o.Count, o.Sum, want)
	}
	seen := c.count[j]
	for int64(len(seen)) < o.Count {
		seen = append(seen, false)
	}
	if seen[o.Count-1] {
		c.dups++
		note("key %s count %d twice", o.Key, o.Count)
	}
	seen[o.Count-1] = true
	c.count[j] = seen
}

// parseOut reads a result: the shape every system writes,
// {"key":"k1","count":2,"sum":3}, without reflection (the reader must
// keep up with the fastest system); anything else through encoding/json.
func parseOut(b []byte) (out, error) {
	rest, ok := bytes.CutPrefix(b, []byte(`{"key":"`))
	if ok {
		if i := bytes.IndexByte(rest, '"'); i >= 0 && bytes.IndexByte(rest[:i], '\\') < 0 {
			key := string(rest[:i])
			if rest, ok = bytes.CutPrefix(rest[i:], []byte(`","count":`)); ok {
				if j := bytes.IndexByte(rest, ','); j >= 0 {
					count, err1 := strconv.ParseInt(string(rest[:j]), 10, 64)
					if tail, ok := bytes.CutPrefix(rest[j:], []byte(`,"sum":`)); ok && len(tail) > 1 && tail[len(tail)-1] == '}' {
						sum, err2 := strconv.ParseInt(string(tail[:len(tail)-1]), 10, 64)
						if err1 == nil && err2 == nil {
							return out{Key: key, Count: count, Sum: sum}, nil
						}
					}
				}
			}
		}
	}
	var o out
	err := json.Unmarshal(b, &o)
	return o, err
}

// verify says whether the output was exactly once for records input
// records.
func (c *checker) verify(records int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.raw {
		if n := c.n.Load(); n != records {
			return fmt.Errorf("%d records out of %d", n, records)
		}
		return nil
	}
	var missing int64
	for j, seen := range c.count {
		n := records / int64(c.keys)
		if int64(j) < records%int64(c.keys) {
			n++
		}
		for i := range n {
			if i >= int64(len(seen)) || !seen[i] {
				missing++
			}
		}
		if int64(len(seen)) > n {
			c.bad = append(c.bad, fmt.Sprintf("key k%d: count %d of %d records", j, len(seen), n))
		}
	}
	if missing == 0 && c.dups == 0 && len(c.bad) == 0 {
		return nil
	}
	return fmt.Errorf("not exactly once: %d missing, %d duplicates, problems %v", missing, c.dups, c.bad)
}

// verifySoFar says whether the output seen so far was exactly once, for
// a run stopped before its input ended: each key's counts 1..m, each
// once, none missing below the highest.
func (c *checker) verifySoFar() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.raw {
		return nil
	}
	var missing int64
	for _, seen := range c.count {
		for _, ok := range seen {
			if !ok {
				missing++
			}
		}
	}
	if missing == 0 && c.dups == 0 && len(c.bad) == 0 {
		return nil
	}
	return fmt.Errorf("not exactly once: %d missing below a later count, %d duplicates, problems %v", missing, c.dups, c.bad)
}

// recheck reads topic read_committed from the start again until it has
// the n results a run's reader counted, and checks them: the check of a
// throughput run, done after its timing. raw counts the passthrough's
// copies without checking them. The error is the check's verdict; err
// is for a read that could not finish.
func (b *bench) recheck(ctx context.Context, topic string, n int64, raw bool) (check, err error) {
	chk := newChecker(b.c.keys)
	chk.raw = raw
	rctx, cancel := context.WithTimeout(ctx, recheckTimeout)
	defer cancel()
	err = b.readEach(rctx, topic, func(r *kgo.Record) {
		chk.take(r)
		if chk.seen() >= n {
			cancel()
		}
	})
	if err == nil && chk.seen() < n {
		err = fmt.Errorf("reading %s again to check it: %d of the %d results the run counted (%v)", topic, chk.seen(), n, rctx.Err())
	}
	if err != nil {
		return nil, err
	}
	return chk.verify(b.c.records), nil
}

// recheckTimeout bounds recheck's read (a variable: a test shortens it).
var recheckTimeout = 2 * time.Minute

// read reads topic read_committed from the start into chk until ctx ends.
func (b *bench) read(ctx context.Context, topic string, chk *checker) error {
	return b.readEach(ctx, topic, chk.take)
}

// readEach reads topic read_committed from the start, calling each for
// every record as it comes, until ctx ends.
func (b *bench) readEach(ctx context.Context, topic string, each func(*kgo.Record)) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		for _, e := range fs.Errors() {
			if !errors.Is(e.Err, context.Canceled) {
				return fmt.Errorf("fetch %s/%d: %w", e.Topic, e.Partition, e.Err)
			}
		}
		fs.EachRecord(each)
	}
}
