package source

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Consumers shares one Kafka consumer among the readers of a worker: the
// readers of one source, one per task, register their partitions with a
// client that fetches them all in one request per broker, and each takes
// its own partition's records from a queue of its own. A task's reader
// otherwise brings a client of its own: at 64 tasks, 64 connections,
// fetch sessions and long polls, for the broker as much as for the
// worker.
//
// Each reader keeps its positions, its checks and its failures to itself:
// its queue is filled only with what its partitions' fetches returned
// while it was registered (registrations change between polls of the
// client, never during one, and franz-go drops what it buffered of a
// partition removed), and a fetch error of its partition fails that
// reader alone. A reader whose partition another reader of the same
// Consumers still reads (a task restarting on a worker before its
// previous run closed) opens a client of its own instead.
//
// A nil *Consumers shares nothing: each reader opens its own client.
type Consumers struct {
	opts       func(name string, task int) []kgo.Opt
	queueBytes int64
	shareFrom  int

	mu      sync.Mutex
	live    map[string]*consumer
	readers map[string]int // per source, its readers open, shared or not
}

// DefaultQueueBytes is the default bound of a reader's queue.
const DefaultQueueBytes = 4 << 20

// DefaultShareFrom is how many readers of a source a worker opens with
// clients of their own before the next share one. Below it a client per
// task costs little, and it fetches for its task alone: a shared fetch
// brings every partition's records at once, and the partition of a
// reader that fell behind (a task at a barrier) is paused, its fetched
// records dropped and fetched again. At 4 tasks sharing cost up to a
// fifth of the records a second at 100 ms checkpoints; at 64, one client
// instead of 64 gave a third more, with 40% less memory.
const DefaultShareFrom = 8

// NewConsumers returns readers' shared consumers. opts, if not nil, gives
// the options of a client of the source called name, of task's reader
// (-1: the shared client), applied after the reader's own, as
// Config.ClientOpts are (which readers of a Consumers ignore).
// queueBytes bounds what a reader's queue holds before its partitions are
// paused (0: DefaultQueueBytes), and the client polls again for readers
// once one's queue is under a quarter of it. Four partition fetches
// (FetchMaxPartitionBytes) is right: a fetch then never fills the queue
// of a reader that keeps up with the others, so partitions are paused
// only for a reader slower than the rest (franz-go drops what it
// buffered of a paused partition, to fetch it again: with three, at 4
// tasks, that cost a fifth of the throughput).
//
// The first shareFrom-1 readers of a source (0: DefaultShareFrom) open
// clients of their own; the readers opened while that many are open share
// one.
func NewConsumers(queueBytes int64, shareFrom int, opts func(name string, task int) []kgo.Opt) *Consumers {
	if queueBytes <= 0 {
		queueBytes = DefaultQueueBytes
	}
	if shareFrom <= 0 {
		shareFrom = DefaultShareFrom
	}
	return &Consumers{opts: opts, queueBytes: queueBytes, shareFrom: shareFrom,
		live: map[string]*consumer{}, readers: map[string]int{}}
}

// join counts a reader of source name opening, and says whether it
// shares a client.
func (cs *Consumers) join(name string) (share bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.readers[name]++
	return cs.readers[name] >= cs.shareFrom
}

// leave counts a reader of source name closed.
func (cs *Consumers) leave(name string) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.readers[name]--; cs.readers[name] <= 0 {
		delete(cs.readers, name)
	}
}

// clientOpts are the options of a client of source name, of task's reader
// or shared (-1).
func (cs *Consumers) clientOpts(name string, task int) []kgo.Opt {
	if cs.opts == nil {
		return nil
	}
	return cs.opts(name, task)
}

// acquire returns the consumer of source name, opening its client if none
// is open, with one more reference.
func (cs *Consumers) acquire(name string, brokers []string, log *slog.Logger) (*consumer, error) {
	key := name + "\x00" + strings.Join(brokers, ",")
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if c := cs.live[key]; c != nil {
		c.refs++
		return c, nil
	}
	// A partition resumed after a pause joins the next fetch, after the
	// one in flight ends: an idle fetch must not hold it long.
	opts := append(consumerOpts(brokers, log), kgo.FetchMaxWait(250*time.Millisecond))
	cl, err := kgo.NewClient(append(opts, cs.clientOpts(name, -1)...)...)
	if err != nil {
		return nil, err
	}
	if err := checkConsumer(cl); err != nil {
		cl.Close()
		return nil, err
	}
	c := &consumer{
		cs: cs, key: key, cl: cl, refs: 1, log: log,
		high:  cs.queueBytes,
		low:   cs.queueBytes / 4,
		slots: map[topicPart]*slot{},
		kick:  make(chan struct{}, 1),
		done:  make(chan struct{}),
	}
	cs.live[key] = c
	go c.dispatch()
	return c, nil
}

// release drops a reference; the last closes the client.
func (c *consumer) release() {
	cs := c.cs
	cs.mu.Lock()
	c.refs--
	last := c.refs == 0
	if last {
		delete(cs.live, c.key)
	}
	cs.mu.Unlock()
	if last {
		c.mu.Lock()
		c.stopping = true
		c.interruptLocked()
		c.mu.Unlock()
		<-c.done
		c.cl.Close()
	}
}

type topicPart struct {
	topic string
	part  int32
}

// consumer is one shared client and the goroutine that polls it and
// fills the registered readers' queues.
type consumer struct {
	cs   *Consumers
	key  string
	cl   *kgo.Client
	log  *slog.Logger
	refs int // guarded by cs.mu

	high, low int64 // a queue's pause and resume bounds, in bytes

	mu       sync.Mutex
	slots    map[topicPart]*slot
	pending  []*change
	poll     context.CancelFunc // the running poll's, nil if none
	stopping bool
	kick     chan struct{} // a queue ran low, or a change is pending
	done     chan struct{} // dispatch returned
}

// change is a registration or its removal, applied between polls.
type change struct {
	s      *slot
	add    map[string]map[int32]kgo.Offset // nil: remove s
	err    error
	doneCh chan struct{}
}

// register makes s the reader of its partitions, fetched from the given
// offsets. It fails with errBusy if one is another reader's.
func (c *consumer) register(s *slot, at map[string]map[int32]kgo.Offset) error {
	return c.apply(&change{s: s, add: at})
}

// unregister removes s: its partitions are no longer fetched, and what the
// client buffered of them is dropped.
func (c *consumer) unregister(s *slot) { _ = c.apply(&change{s: s}) }

var errBusy = errors.New("partition read by another reader of the worker")

func (c *consumer) apply(ch *change) error {
	ch.doneCh = make(chan struct{})
	c.mu.Lock()
	c.pending = append(c.pending, ch)
	c.interruptLocked()
	c.mu.Unlock()
	select {
	case <-ch.doneCh:
		return ch.err
	case <-c.done:
		// The dispatcher returned (the client closed under it): nothing
		// is fetched for anyone any more.
		return kgo.ErrClientClosed
	}
}

// interruptLocked ends the running poll, or the dispatcher's wait.
func (c *consumer) interruptLocked() {
	if c.poll != nil {
		c.poll()
	}
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// dispatch polls the client and fills the queues until the last reader
// releases it. Registrations change only here, between polls: what a poll
// returns is of the readers registered when it began.
func (c *consumer) dispatch() {
	defer close(c.done)
	for {
		c.mu.Lock()
		c.applyPendingLocked()
		if c.stopping {
			c.mu.Unlock()
			return
		}
		if !c.hungryLocked() {
			// Every queue holds enough: poll when one runs low, so that
			// partitions are paused rarely (a paused partition's data
			// franz-go buffered is dropped and fetched again).
			c.mu.Unlock()
			<-c.kick
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		c.poll = cancel
		c.mu.Unlock()
		fs := c.cl.PollFetches(ctx)
		c.mu.Lock()
		c.poll = nil
		cancel()
		closed := c.routeLocked(fs)
		c.mu.Unlock()
		if closed {
			return
		}
	}
}

func (c *consumer) applyPendingLocked() {
	for _, ch := range c.pending {
		if ch.add != nil {
			ch.err = c.addLocked(ch.s, ch.add)
		} else {
			c.removeLocked(ch.s)
		}
		close(ch.doneCh)
	}
	c.pending = nil
}

func (c *consumer) addLocked(s *slot, at map[string]map[int32]kgo.Offset) error {
	for t, ps := range at {
		for p := range ps {
			if c.slots[topicPart{t, p}] != nil {
				return fmt.Errorf("%s/%d: %w", t, p, errBusy)
			}
		}
	}
	for t, ps := range at {
		for p := range ps {
			tp := topicPart{t, p}
			c.slots[tp] = s
			s.tps = append(s.tps, tp)
		}
	}
	c.cl.AddConsumePartitions(at)
	return nil
}

func (c *consumer) removeLocked(s *slot) {
	if len(s.tps) == 0 {
		return
	}
	rm := map[string][]int32{}
	for _, tp := range s.tps {
		if c.slots[tp] == s {
			delete(c.slots, tp)
			rm[tp.topic] = append(rm[tp.topic], tp.part)
		}
	}
	c.cl.RemoveConsumePartitions(rm)
	s.mu.Lock()
	s.gone = true
	if s.paused {
		// Pauses outlive a removal in franz-go: the partitions' next
		// reader must find them fetched.
		c.cl.ResumeFetchPartitions(rm)
		s.paused = false
	}
	s.mu.Unlock()
}

// hungryLocked says whether a registered, unpaused queue is below its
// resume bound.
func (c *consumer) hungryLocked() bool {
	for _, s := range c.slots {
		s.mu.Lock()
		hungry := !s.paused && !s.failed && s.bytes < c.low
		s.mu.Unlock()
		if hungry {
			return true
		}
	}
	return false
}

// routeLocked queues what fs holds for the readers registered. It reports
// whether the client is closed.
func (c *consumer) routeLocked(fs kgo.Fetches) (closed bool) {
	for _, e := range fs.Errors() {
		if e.Topic != "" {
			continue // a partition's, below
		}
		switch {
		case errors.Is(e.Err, context.Canceled), errors.Is(e.Err, context.DeadlineExceeded):
		case errors.Is(e.Err, kgo.ErrClientClosed):
			closed = true
		default:
			// An error of the client, no partition's: every reader
			// fails with it and restarts from its checkpoint.
			for _, s := range c.slots {
				s.deliver(c, nil, &e)
			}
		}
	}
	fs.EachPartition(func(p kgo.FetchTopicPartition) {
		s := c.slots[topicPart{p.Topic, p.Partition}]
		if s != nil {
			var err *kgo.FetchError
			if p.Err != nil {
				err = &kgo.FetchError{Topic: p.Topic, Partition: p.Partition, Err: p.Err}
			}
			s.deliver(c, p.Records, err)
			return
		}
		if p.Err == nil {
			// Not registered: cannot be, registrations change between
			// polls only and a removal drops what the client buffered.
			if len(p.Records) > 0 {
				c.log.Error("kafka source dropped records of a partition no reader reads (a bug)",
					"topic", p.Topic, "partition", p.Partition, "records", len(p.Records))
			}
			return
		}
		// An error of no registered partition (a topic's): every reader
		// of the topic gets it.
		for tp, s := range c.slots {
			if tp.topic == p.Topic {
				s.deliver(c, nil, &kgo.FetchError{Topic: p.Topic, Partition: p.Partition, Err: p.Err})
			}
		}
	})
	return closed
}

// slot is a reader's queue in a shared consumer.
type slot struct {
	tps []topicPart // set when it registers, before its reader takes; read-only after

	mu     sync.Mutex
	recs   []*kgo.Record
	head   int   // recs[head:] are queued
	bytes  int64 // their estimated size
	errs   []kgo.FetchError
	failed bool // an error came: what follows is not queued
	paused bool
	gone   bool          // unregistered
	notify chan struct{} // records or an error came, or a Wake
}

func newSlot() *slot { return &slot{notify: make(chan struct{}, 1)} }

// recordOverhead is about what a record adds to its key, value and
// headers in a fetched batch: a queue is counted in the bytes that
// FetchMaxPartitionBytes bounds, so that a fetch adds at most about that
// much to it (the records' structs in memory take more: about 160 bytes
// a record).
const recordOverhead = 40

func recordBytes(r *kgo.Record) int64 {
	n := len(r.Key) + len(r.Value) + recordOverhead
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return int64(n)
}

// deliver queues records, or an error, after which nothing more is
// queued: the reader fails with it and its next run reads from its
// checkpoint again.
func (s *slot) deliver(c *consumer, recs []*kgo.Record, err *kgo.FetchError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed || s.gone {
		return
	}
	switch {
	case err != nil:
		s.errs = append(s.errs, *err)
		s.failed = true
	case len(recs) == 0:
		return
	default:
		s.recs = append(s.recs, recs...)
		for _, r := range recs {
			s.bytes += recordBytes(r)
		}
		if !s.paused && s.bytes >= c.high {
			s.paused = true
			c.cl.PauseFetchPartitions(s.partitions())
		}
	}
	s.wake()
}

func (s *slot) partitions() map[string][]int32 {
	m := make(map[string][]int32, len(s.tps))
	for _, tp := range s.tps {
		m[tp.topic] = append(m[tp.topic], tp.part)
	}
	return m
}

func (s *slot) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// take appends at most max queued records to dst, or returns the errors
// that came before them. When the queue falls under the resume bound it
// resumes the paused partitions, and tells the dispatcher it may poll.
func (s *slot) take(c *consumer, dst []*kgo.Record, max int) ([]*kgo.Record, []kgo.FetchError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.errs) > 0 {
		errs := s.errs
		s.errs = nil
		return dst, errs
	}
	queued := len(s.recs) - s.head
	n := min(max, queued)
	if n == queued {
		s.bytes = 0
	} else {
		// The records' share of the queue's size, not their own sizes
		// again: a bound needs no more.
		s.bytes -= s.bytes * int64(n) / int64(queued)
	}
	dst = append(dst, s.recs[s.head:s.head+n]...)
	clear(s.recs[s.head : s.head+n])
	s.head += n
	if s.head == len(s.recs) {
		s.recs, s.head = s.recs[:0], 0
	} else if s.head > len(s.recs)/2 {
		s.recs = slices.Delete(s.recs, 0, s.head)
		s.head = 0
	}
	if s.bytes < c.low && !s.gone && !s.failed {
		if s.paused {
			s.paused = false
			c.cl.ResumeFetchPartitions(s.partitions())
		}
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
	return dst, nil
}

// poll waits at most wait for records or an error of s, or a Wake.
func (s *slot) poll(ctx context.Context, c *consumer, dst []*kgo.Record, max int, wait time.Duration) ([]*kgo.Record, []kgo.FetchError, error) {
	dst, errs := s.take(c, dst, max)
	if len(dst) > 0 || len(errs) > 0 {
		return dst, errs, nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-s.notify:
	case <-t.C:
		return dst, nil, nil
	case <-ctx.Done():
		return dst, nil, ctx.Err()
	}
	dst, errs = s.take(c, dst, max)
	return dst, errs, nil
}
