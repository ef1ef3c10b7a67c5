package kafkabench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/runtime"
	"github.com/weirstream/weir/sink"
	"github.com/weirstream/weir/source"
	"github.com/weirstream/weir/state"
	"github.com/weirstream/weir/stream"
)

// countIn and countOut are the count job's records, as cmd/processor has
// them.
type countIn struct {
	Key string
	N   int64
}

type countOut struct {
	Key   string `json:"key"`
	Count int64  `json:"count"`
	Sum   int64  `json:"sum"`
}

func decodeCount(r *kgo.Record) (countIn, error) {
	if len(r.Key) == 0 {
		return countIn{}, errors.New("count: record has no key")
	}
	n, err := strconv.ParseInt(string(r.Value), 10, 64)
	if err != nil {
		return countIn{}, fmt.Errorf("count: value %q is not a decimal int64", r.Value)
	}
	return countIn{Key: string(r.Key), N: n}, nil
}

func encodeCount(o countOut) (*kgo.Record, error) {
	v, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	return &kgo.Record{Key: []byte(o.Key), Value: v}, nil
}

// countJob is one run of the count job: source -> KeyBy(record key) ->
// count -> exactly-once Kafka sink, all tasks in this process.
type countJob struct {
	Brokers       []string
	Name          string
	Input, Output string
	Partitions    int32
	Interval      time.Duration
	Dir           string // checkpoints and state
	Log           *slog.Logger
}

// start runs the job until ctx ends. ready is closed once every task
// completed a checkpoint (its sink initialised its transactional ids); the
// returned channel yields Run's error.
func (j countJob) start(ctx context.Context) (ready <-chan struct{}, done <-chan error, err error) {
	src, err := source.Kafka(source.Config[countIn]{Brokers: j.Brokers, Topics: []string{j.Input}, Decode: decodeCount})
	if err != nil {
		return nil, nil, err
	}
	out, err := sink.Kafka(sink.Config[countOut]{
		Brokers:            j.Brokers,
		Topic:              j.Output,
		Encode:             encodeCount,
		Delivery:           sink.ExactlyOnce,
		TransactionTimeout: time.Minute,
	})
	if err != nil {
		return nil, nil, err
	}
	job := stream.NewJob(j.Name)
	in := stream.Source(job, "input", src)
	keyed := stream.KeyBy(in, "by-key", func(r countIn) string { return r.Key }, state.String())
	counts := stream.Process(keyed, "count", func(s *stream.Setup) (stream.Processor[string, countIn, countOut], error) {
		count, err := stream.ValueState(s, "count", state.Int64())
		if err != nil {
			return stream.Processor[string, countIn, countOut]{}, err
		}
		sum, err := stream.ValueState(s, "sum", state.Int64())
		if err != nil {
			return stream.Processor[string, countIn, countOut]{}, err
		}
		return stream.Processor[string, countIn, countOut]{
			Process: func(ctx *stream.Context[string, countOut], r countIn) error {
				c, _, err := count.Get()
				if err != nil {
					return err
				}
				s, _, err := sum.Get()
				if err != nil {
					return err
				}
				c, s = c+1, s+r.N
				if err := count.Set(c); err != nil {
					return err
				}
				if err := sum.Set(s); err != nil {
					return err
				}
				return ctx.Emit(countOut{Key: ctx.Key(), Count: c, Sum: s})
			},
		}, nil
	})
	stream.Sink(counts, "output", out)
	plan, err := job.Build()
	if err != nil {
		return nil, nil, err
	}
	storage, err := checkpoint.NewFile(j.Dir + "/checkpoints")
	if err != nil {
		return nil, nil, err
	}
	tasks := make([]int, j.Partitions)
	for i := range tasks {
		tasks[i] = i
	}
	obs := &readyObserver{waiting: map[int]bool{}, ready: make(chan struct{})}
	for _, t := range tasks {
		obs.waiting[t] = true
	}
	errc := make(chan error, 1)
	go func() {
		errc <- runtime.Run(ctx, plan, runtime.Config{
			Tasks:      tasks,
			Storage:    storage,
			Checkpoint: checkpoint.Config{Interval: j.Interval, Timeout: time.Minute, TolerableFailures: 3},
			StateDir:   j.Dir + "/state",
			Epoch:      time.Now().UnixNano(),
			Logger:     j.Log,
			Observer:   obs,
		})
	}()
	return obs.ready, errc, nil
}

// readyObserver closes ready once every task completed a checkpoint.
type readyObserver struct {
	runtime.NopObserver
	mu      sync.Mutex
	waiting map[int]bool
	ready   chan struct{}
}

func (o *readyObserver) CheckpointCompleted(_ string, task int, _ checkpoint.Manifest) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.waiting[task] {
		delete(o.waiting, task)
		if len(o.waiting) == 0 {
			close(o.ready)
		}
	}
}
