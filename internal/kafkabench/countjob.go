package kafkabench

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/examples/count"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/sink"
	"github.com/weirstream/weir/source"
	"github.com/weirstream/weir/stream"
)

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
	src, err := source.Kafka(source.Config[count.In]{Brokers: j.Brokers, Topics: []string{j.Input}, Decode: count.Decode})
	if err != nil {
		return nil, nil, err
	}
	out, err := sink.Kafka(sink.Config[count.Out]{
		Brokers:            j.Brokers,
		Topic:              j.Output,
		Encode:             count.Encode,
		Delivery:           sink.ExactlyOnce,
		TransactionTimeout: time.Minute,
	})
	if err != nil {
		return nil, nil, err
	}
	job := stream.NewJob(j.Name)
	stream.Sink(count.Counts(stream.Source(job, count.SourceName, src)), count.SinkName, out)
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
		errc <- engine.Run(ctx, plan, engine.Config{
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
	engine.NopObserver
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
