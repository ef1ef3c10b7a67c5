package worker

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/examples/count"
	"github.com/weirstream/weir/examples/wordcount"
	"github.com/weirstream/weir/internal/cli"
	"github.com/weirstream/weir/internal/engine"
	"github.com/weirstream/weir/internal/testcluster"
)

// TestBadRecordsPolicy: a mis-keyed record of the input fails the task
// under --on-decode-error fail; one of an internal topic fails it under
// either policy, saying why (weir keyed it itself).
func TestBadRecordsPolicy(t *testing.T) {
	mk := &engine.MisKeyedError{Operator: "count", KeyBy: "by-word", Key: `"w"`, KeyBytes: []byte("w"), Task: 0, Owner: 1, Partitions: 2, Partitioner: "murmur2"}
	for _, tc := range []struct {
		name       string
		deadLetter string
	}{{"fail", ""}, {"dead-letter", "dlq"}} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			c.DeadLetter = tc.deadLetter
			b, closeB, err := newBadRecords(&c, nil, []string{"job-by-word-repartition"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer closeB()
			if (b.cl != nil) != (tc.deadLetter != "") {
				t.Fatalf("dead-letter producer %v with --dead-letter %q", b.cl != nil, tc.deadLetter)
			}
			pos := engine.Position{Source: "by-word-read", Topic: "job-by-word-repartition", Partition: 0, Offset: 7}
			err = b.MisKeyed(t.Context(), engine.TaskInfo{}, pos, mk.KeyBytes, mk)
			if !errors.Is(err, engine.ErrMisKeyed) || !strings.Contains(err.Error(), "internal topic job-by-word-repartition") {
				t.Errorf("a record of an internal topic: %v, want it to fail the task", err)
			}
			if tc.deadLetter == "" {
				pos.Topic = "in"
				if err := b.MisKeyed(t.Context(), engine.TaskInfo{}, pos, mk.KeyBytes, mk); err != mk {
					t.Errorf("a record of the input under --on-decode-error fail: %v, want its MisKeyedError", err)
				}
			}
		})
	}
}

// TestCheckDeadLetter: the dead-letter topic must exist when dead-lettering
// is on, and is not asked for when it is off.
func TestCheckDeadLetter(t *testing.T) {
	c := testcluster.Kafka(t)
	dl := testcluster.UniqueName(t, "dl")
	c.CreateTopics(t, 1, dl)
	for _, tc := range []struct {
		name       string
		brokers    []string
		deadLetter string
		policy     string
		want       string // "": no error
	}{
		{"exists", c.Brokers, dl, "", ""},
		{"missing", c.Brokers, dl + "-missing", "", `--dead-letter: topic "` + dl + `-missing" does not exist`},
		{"off", []string{"127.0.0.1:1"}, "", "fail", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := validConfig()
			cfg.Brokers, cfg.DeadLetter, cfg.OnDecodeError = tc.brokers, tc.deadLetter, tc.policy
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			err := checkDeadLetter(ctx, &cfg, nil, 0)
			var ue cli.UsageError
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("checkDeadLetter: %v, want nil", err)
			case tc.want != "" && (!errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("checkDeadLetter: %v, want a usage error %q", err, tc.want)
			}
		})
	}
}

// TestDeadLetterTopicCheckedAtStart: a worker whose --dead-letter topic
// does not exist fails at start with a usage error naming the setting and
// the topic; no task opens its source to find out, fails and restarts.
func TestDeadLetterTopicCheckedAtStart(t *testing.T) {
	j := newFaultJob(t)
	cfg := j.config(t)
	cfg.DeadLetter = testcluster.UniqueName(t, "no-such-dl")
	begun := time.Now()
	j.start(t, cfg, []Job{NewJob("count", count.Build)}, Options{})
	var err error
	select {
	case err = <-j.done:
		j.done <- err // for the cleanup
	case <-time.After(30 * time.Second):
		t.Fatalf("the worker still runs after 30s (%d task failures)", len(j.obs.failures()))
	}
	t.Logf("Run returned after %v: %v", time.Since(begun).Round(time.Millisecond), err)
	var ue cli.UsageError
	want := `--dead-letter: topic "` + cfg.DeadLetter + `" does not exist`
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), want) {
		t.Errorf("Run: %v, want a usage error %q", err, want)
	}
	if n, f := j.obs.restores(), j.obs.failures(); n != 0 || len(f) != 0 {
		t.Errorf("%d tasks restored and %d failed (%v): the topic was not checked at start", n, len(f), f)
	}
}

// TestDeadLetterNotAnInternalTopic: --dead-letter naming a KeyBy's
// repartition topic is refused at start, before Kafka is asked.
func TestDeadLetterNotAnInternalTopic(t *testing.T) {
	cfg := validConfig()
	cfg.Brokers, cfg.Name, cfg.Tasks, cfg.HTTPAddr = []string{"127.0.0.1:1"}, "wc", []int{0}, "off"
	cfg.DeadLetter = "wc-" + wordcount.RepartitionName + "-repartition"
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err := Run(ctx, cfg, []Job{NewJob("wordcount", wordcount.Build)}, Options{Logger: slog.New(slog.DiscardHandler)})
	var ue cli.UsageError
	want := `--dead-letter: "wc-by-word-repartition" is an internal (repartition) topic`
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), want) {
		t.Errorf("Run: %v, want a usage error %q", err, want)
	}
}
