package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/checkpoint"
)

// reachability answers the engine's question of a task waiting to restart
// (engine.Config.Reachable): do the broker and the checkpoint store answer?
// One probe serves every waiting task of the worker for an interval, so a
// broker restart under 64 tasks costs a few requests a second, not 64 times
// that.
type reachability struct {
	every time.Duration
	probe func(ctx context.Context) error

	mu  sync.Mutex
	at  time.Time
	err error
}

func (r *reachability) check(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.at.IsZero() && time.Since(r.at) < r.every {
		return r.err
	}
	r.err = r.probe(ctx)
	r.at = time.Now()
	return r.err
}

// probePrefix is listed in the checkpoint store to see that it answers: no
// object is ever written under it, so the answer is an empty list.
const probePrefix = "reachable-probe/"

// newReachability probes the brokers with a client of its own (an
// ApiVersions request, kgo.Client.Ping), the store with a List of an
// empty prefix, and the state directory by writing, syncing and removing
// a one-byte file through the stores' filesystem (a full or failing disk
// fails the tasks as surely as a lost broker). The caller closes the
// returned client.
func newReachability(brokers []string, opts []kgo.Opt, store checkpoint.Storage, fsys vfs.FS, stateDir string, every time.Duration) (*reachability, func(), error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ClientID("weir-probe")}, opts...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka client for the reachability probe: %w", err)
	}
	var kafka, storage slowness
	r := &reachability{every: every, probe: func(ctx context.Context) error {
		var errs []error
		start := time.Now()
		err := cl.Ping(ctx)
		if err == nil {
			err = kafka.judge(time.Since(start))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("kafka: %w", err))
		}
		start = time.Now()
		_, err = store.List(ctx, probePrefix)
		if err == nil {
			err = storage.judge(time.Since(start))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("checkpoint storage: %w", err))
		}
		if err := probeDisk(fsys, stateDir); err != nil {
			errs = append(errs, fmt.Errorf("state directory: %w", err))
		}
		return errors.Join(errs...)
	}}
	// A first probe now learns how fast the broker and the store usually
	// answer, before a fault makes them slow; what it finds does not
	// matter yet.
	pctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = r.probe(pctx)
	cancel()
	return r, cl.Close, nil
}

// slowness judges one dependency's answer times against its own usual. A
// broker or a store that answers ten times slower than it used to is in a
// fault (S3 latency, a slow link) that fails checkpoints as surely as one
// that does not answer, and its end is when a task waiting to restart
// should: so slowRun slow answers in a row count as no answer. An answer
// is slow over slowFactor times the usual and over slowFloor, which keeps
// a store answering in a millisecond from being slow at 20. The usual is
// a moving average of the answers that were not slow.
type slowness struct {
	usual time.Duration // 0 before the first answer
	run   int           // slow answers in a row
}

const (
	slowFactor = 10
	slowFloor  = 250 * time.Millisecond
	slowRun    = 2
)

// judge takes one answer's time; an error when it makes slowRun slow ones
// in a row.
func (s *slowness) judge(took time.Duration) error {
	if s.usual > 0 && took > max(slowFloor, slowFactor*s.usual) {
		s.run++
		if s.run >= slowRun {
			return fmt.Errorf("answered in %v, %d times in a row over %d times its usual %v", took.Round(time.Millisecond),
				s.run, slowFactor, s.usual.Round(time.Microsecond))
		}
		return nil
	}
	s.run = 0
	if s.usual == 0 {
		s.usual = took
	} else {
		s.usual = (4*s.usual + took) / 5
	}
	return nil
}

// probeDisk writes, syncs and removes a one-byte file in dir.
func probeDisk(fsys vfs.FS, dir string) error {
	if fsys == nil {
		fsys = vfs.Default
	}
	name := fsys.PathJoin(dir, ".weir-probe")
	f, err := fsys.Create(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	_, werr := f.Write([]byte{1})
	serr := f.Sync()
	cerr := f.Close()
	return errors.Join(werr, serr, cerr, fsys.Remove(name))
}
