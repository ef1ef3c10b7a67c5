package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/examples/balance"
	"github.com/weirstream/weir/examples/nexmark"
	"github.com/weirstream/weir/internal/cli"
	"github.com/weirstream/weir/worker"
)

// generateConfig is the configuration of `processor generate`.
type generateConfig struct {
	Brokers []string
	// Security is how generate connects, as the worker does (TLS, SASL).
	Security worker.Security
	Topic    string
	// Job is the record format: count (key "k<i%keys>", value "<i>") or
	// balance (key "acc-<i%keys>", value a JSON transfer with id "t-<i>"
	// and amount transferAmount(i)).
	Job string
	// Records are numbered From .. From+Records-1.
	Records int64
	From    int64
	Keys    int
	// Create creates Topic with Partitions partitions (an existing topic
	// must have that many). Without it the topic must exist.
	Create     bool
	Partitions int
	// Rate caps records per second; 0: as fast as the broker takes them.
	Rate  int
	Batch int
}

func defaultGenerateConfig() generateConfig {
	return generateConfig{Brokers: []string{"127.0.0.1:9092"}, Job: "count", Keys: 100, Partitions: 4, Batch: 5000}
}

func (c *generateConfig) Validate() error {
	errs := cli.CheckBrokers(c.Brokers)
	if err := c.Security.Validate(); err != nil {
		errs = append(errs, err)
	}
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, args...)))
	}
	if c.Topic == "" {
		bad("topic", "required")
	}
	if c.Job != "count" && c.Job != "balance" && c.Job != "wordcount" && c.Job != "nexmark" {
		bad("job", "%q, want count, balance, wordcount or nexmark", c.Job)
	}
	if c.Records < 0 {
		bad("records", "must not be negative, got %d", c.Records)
	}
	if c.From < 0 {
		bad("from", "must not be negative, got %d", c.From)
	}
	if c.Keys <= 0 {
		bad("keys", "must be > 0, got %d", c.Keys)
	}
	if c.Partitions <= 0 {
		bad("partitions", "must be > 0, got %d", c.Partitions)
	}
	if c.Rate < 0 {
		bad("rate", "must not be negative, got %d", c.Rate)
	}
	if c.Batch <= 0 {
		bad("batch", "must be > 0, got %d", c.Batch)
	}
	return errors.Join(errs...)
}

func generateCommand(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) error {
	c, err := parseGenerate(args, lookup, stderr)
	if err != nil {
		return err
	}
	n, err := generate(ctx, c, nil)
	if err != nil {
		return c.Security.ExplainKafkaErr(err)
	}
	if n == 0 {
		fmt.Fprintf(stdout, "topic %s ready, no records written\n", c.Topic)
		return nil
	}
	fmt.Fprintf(stdout, "wrote %d %s records to %s: numbers %d..%d, %d keys\n", n, c.Job, c.Topic, c.From, c.From+n-1, c.Keys)
	return nil
}

// parseGenerate reads generate's settings from args and the environment and
// validates them.
func parseGenerate(args []string, lookup func(string) (string, bool), stderr io.Writer) (generateConfig, error) {
	c := defaultGenerateConfig()
	fs := cli.NewFlagSet("processor generate", "Write numbered test records to --topic: count records (key k<i%keys>, value <i>)\nor balance transfers (key acc-<i%keys>, value {\"id\":\"t-<i>\",\"account\":...,\"amount\":...}).", stderr)
	fs.Var(cli.List{V: &c.Brokers}, "brokers", "Kafka bootstrap addresses, comma-separated")
	c.Security.RegisterFlags(fs)
	fs.StringVar(&c.Topic, "topic", c.Topic, "topic to write (required)")
	fs.StringVar(&c.Job, "job", c.Job, "record format: count, balance, wordcount (lines of 5 words, --keys distinct) or nexmark (Nexmark events at 10,000/s of event time from the start; the nexmark-q* jobs read them)")
	fs.Int64Var(&c.Records, "records", c.Records, "number of records")
	fs.Int64Var(&c.From, "from", c.From, "number of the first record")
	fs.IntVar(&c.Keys, "keys", c.Keys, "number of distinct keys (accounts)")
	fs.BoolVar(&c.Create, "create", c.Create, "create the topic with --partitions partitions if it does not exist")
	fs.IntVar(&c.Partitions, "partitions", c.Partitions, "partitions of a created topic")
	fs.IntVar(&c.Rate, "rate", c.Rate, "records per second at most (0: no limit)")
	fs.IntVar(&c.Batch, "batch", c.Batch, "records per produce batch")
	if err := cli.Parse(fs, args, lookup); err != nil {
		return c, err
	}
	if err := c.Validate(); err != nil {
		return c, cli.UsageError{Err: err}
	}
	return c, nil
}

// generate writes the records and returns how many it wrote. progress, if
// set, is advanced after each acknowledged batch.
func generate(ctx context.Context, c generateConfig, progress *atomic.Int64) (int64, error) {
	security, err := c.Security.ClientOpts()
	if err != nil {
		return 0, cli.UsageError{Err: err}
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(c.Brokers...),
		kgo.DefaultProduceTopic(c.Topic),
		kgo.ProducerLinger(5 * time.Millisecond),
		// Idempotent (the default): a retried batch is written once.
		kgo.RequiredAcks(kgo.AllISRAcks()),
	}, security...)...)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	if err := ensureTopic(ctx, kadm.NewClient(cl), c.Topic, c.Create, int32(c.Partitions)); err != nil {
		return 0, err
	}
	start := time.Now()
	record := func(i int64) (*kgo.Record, error) { return generatedRecord(c.Job, i, c.Keys) }
	if c.Job == "nexmark" {
		// Event times start at the generator's start (rounded to the
		// second), as a live source's would.
		g, err := nexmark.NewGenerator(nexmark.DefaultConfig(start.Truncate(time.Second)))
		if err != nil {
			return 0, err
		}
		record = func(i int64) (*kgo.Record, error) { return nexmark.Encode(g.Event(i)) }
	}
	var written int64
	batch := make([]*kgo.Record, 0, c.Batch)
	for written < c.Records {
		batch = batch[:0]
		for i := written; i < c.Records && len(batch) < c.Batch; i++ {
			r, err := record(c.From + i)
			if err != nil {
				return written, err
			}
			batch = append(batch, r)
		}
		if err := cl.ProduceSync(ctx, batch...).FirstErr(); err != nil {
			return written, fmt.Errorf("produce to %s after %d records: %w", c.Topic, written, err)
		}
		written += int64(len(batch))
		if progress != nil {
			progress.Store(written)
		}
		if c.Rate > 0 && written < c.Records {
			// Pace, not synchronisation: the next batch is due when the
			// rate allows it.
			due := start.Add(time.Duration(float64(written) / float64(c.Rate) * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-ctx.Done():
					t.Stop()
					return written, ctx.Err()
				case <-t.C:
				}
			}
		}
	}
	return written, nil
}

// ensureTopic creates topic (create) or checks that it exists.
func ensureTopic(ctx context.Context, adm *kadm.Client, topic string, create bool, partitions int32) error {
	tds, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return fmt.Errorf("describe topic %s: %w", topic, err)
	}
	td, ok := tds[topic]
	if ok && td.Err == nil {
		if create && int32(len(td.Partitions)) != partitions {
			return fmt.Errorf("topic %s exists with %d partitions, not %d", topic, len(td.Partitions), partitions)
		}
		return nil
	}
	if !create {
		return fmt.Errorf("topic %s does not exist (pass --create to create it)", topic)
	}
	resp, err := adm.CreateTopic(ctx, partitions, -1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	return nil
}

func generatedRecord(job string, i int64, keys int) (*kgo.Record, error) {
	k := i % int64(keys)
	if job == "wordcount" {
		// Line i: 5 words of the vocabulary w0..w<keys-1>, keyed by
		// nothing its words have to do with.
		words := make([]string, 5)
		for j := range words {
			words[j] = "w" + strconv.FormatInt((i*7+int64(j)*13)%int64(keys), 10)
		}
		return &kgo.Record{Key: []byte("line-" + strconv.FormatInt(i, 10)), Value: []byte(strings.Join(words, " "))}, nil
	}
	if job == "balance" {
		return balance.EncodeTransfer(balance.Transfer{
			ID:      "t-" + strconv.FormatInt(i, 10),
			Account: "acc-" + strconv.FormatInt(k, 10),
			Amount:  transferAmount(i),
		})
	}
	return &kgo.Record{Key: []byte("k" + strconv.FormatInt(k, 10)), Value: []byte(strconv.FormatInt(i, 10))}, nil
}

// transferAmount is the amount of generated transfer i: -1000..1000 cents,
// spread so that balances move both ways.
func transferAmount(i int64) int64 { return (i*7919)%2001 - 1000 }
