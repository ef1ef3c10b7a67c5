package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/examples/balance"
	"github.com/weirstream/weir/examples/count"
	"github.com/weirstream/weir/examples/wordcount"
	"github.com/weirstream/weir/internal/cli"
	"github.com/weirstream/weir/worker"
)

// verifyConfig is the configuration of `processor verify`.
type verifyConfig struct {
	Brokers []string
	// Security is how verify connects, as the worker does (TLS, SASL).
	Security worker.Security
	Job      string
	Input    string
	Output   string
	Timeout  time.Duration
	// Wait re-reads until the verdict is clean or Wait has passed: for
	// output still held back by open transactions of running workers.
	Wait time.Duration
}

func (c *verifyConfig) Validate() error {
	errs := cli.CheckBrokers(c.Brokers)
	if err := c.Security.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Job != "count" && c.Job != "balance" && c.Job != "wordcount" {
		errs = append(errs, fmt.Errorf("--job: %q, want count, balance or wordcount", c.Job))
	}
	if c.Input == "" {
		errs = append(errs, errors.New("--input: required"))
	}
	if c.Output == "" {
		errs = append(errs, errors.New("--output: required"))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("--timeout: must be > 0, got %v", c.Timeout))
	}
	if c.Wait < 0 {
		errs = append(errs, fmt.Errorf("--wait: must not be negative, got %v", c.Wait))
	}
	return errors.Join(errs...)
}

// Verdict is what verify found. Clean says the output holds the effect of
// every input record exactly once.
type Verdict struct {
	In, Out    int64
	Duplicates int64 // effects seen more than once
	Missing    int64 // input records with no effect in the output
	// WrongTotals counts keys (count: sums; balance: accounts) whose last
	// output disagrees with the input.
	WrongTotals int64
	// BadInput counts input records the job cannot decode (dead-lettered or
	// failing the job, not expected in the output).
	BadInput int64
	// Malformed counts output records verify could not parse, or whose
	// Kafka key is not the key their value names.
	Malformed int64
	// OutOfOrder counts output records, not duplicates, that do not follow
	// their key's previous output in its partition (count: the next count;
	// balance: the account's next transfer in input order), or whose
	// running total is not that of the inputs up to them.
	OutOfOrder int64
	// Notes say why records may be missing (open transactions).
	Notes []string
	job   string
}

func (v Verdict) Clean() bool {
	return v.Duplicates == 0 && v.Missing == 0 && v.WrongTotals == 0 && v.Malformed == 0 && v.OutOfOrder == 0
}

// Complete says whether the verdict saw all there is: no transaction held
// records back from either topic (Notes), so that nothing more can come.
func (v Verdict) Complete() bool { return len(v.Notes) == 0 }

func (v Verdict) String() string {
	totals, in := "wrong sums", "records in"
	switch v.job {
	case "balance":
		totals = "wrong balances"
	case "wordcount":
		totals, in = "wrong counts", "words in"
	}
	s := fmt.Sprintf("%s %d, records out %d, duplicates %d, missing %d, %s %d", in, v.In, v.Out, v.Duplicates, v.Missing, totals, v.WrongTotals)
	if v.BadInput > 0 {
		s += fmt.Sprintf(", undecodable input %d", v.BadInput)
	}
	if v.Malformed > 0 {
		s += fmt.Sprintf(", malformed output %d", v.Malformed)
	}
	if v.OutOfOrder > 0 {
		s += fmt.Sprintf(", out of order or wrong running totals %d", v.OutOfOrder)
	}
	return s
}

func verifyCommand(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) error {
	c, err := parseVerify(args, lookup, stderr)
	if err != nil {
		return err
	}
	opts, err := c.Security.ClientOpts()
	if err != nil {
		return cli.UsageError{Err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout+c.Wait)
	defer cancel()
	deadline := time.Now().Add(c.Wait)
	var v Verdict
	for {
		var err error
		if v, err = verify(ctx, c.Brokers, c.Job, c.Input, c.Output, opts...); err != nil {
			return c.Security.ExplainKafkaErr(err)
		}
		if (v.Clean() && v.Complete()) || time.Now().After(deadline) {
			break
		}
		fmt.Fprintf(stderr, "not yet: %v\n", v)
		select { // pacing, not synchronisation: the workers give no signal
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	for _, n := range v.Notes {
		fmt.Fprintln(stdout, "note:", n)
	}
	fmt.Fprintln(stdout, v)
	switch {
	case !v.Clean():
		return errors.New("not exactly once")
	case !v.Complete():
		// Records held back by an open transaction may be duplicates.
		return errors.New("not exactly once as far as read: transactions still open hold records back (notes above)")
	}
	return nil
}

// parseVerify reads verify's settings from args and the environment and
// validates them.
func parseVerify(args []string, lookup func(string) (string, bool), stderr io.Writer) (verifyConfig, error) {
	c := verifyConfig{Brokers: []string{"127.0.0.1:9092"}, Job: "count", Timeout: 2 * time.Minute}
	fs := cli.NewFlagSet("processor verify", "Read --input and --output read_committed up to their last stable offsets and check that\nthe output has the effect of every input record exactly once. Exits 1 if not.", stderr)
	fs.Var(cli.List{V: &c.Brokers}, "brokers", "Kafka bootstrap addresses, comma-separated")
	c.Security.RegisterFlags(fs)
	fs.StringVar(&c.Job, "job", c.Job, "the job that wrote the output: count, balance or wordcount")
	fs.StringVar(&c.Input, "input", c.Input, "input topic (required)")
	fs.StringVar(&c.Output, "output", c.Output, "output topic (required)")
	fs.DurationVar(&c.Timeout, "timeout", c.Timeout, "give up reading after this")
	fs.DurationVar(&c.Wait, "wait", c.Wait, "re-read every second until the verdict is clean, for at most this long (0: read once)")
	if err := cli.Parse(fs, args, lookup); err != nil {
		return c, err
	}
	if err := c.Validate(); err != nil {
		return c, cli.UsageError{Err: err}
	}
	return c, nil
}

// verify reads input and output and checks the output of job; its
// clients add opts (worker.Security's) to brokers.
func verify(ctx context.Context, brokers []string, job, input, output string, opts ...kgo.Opt) (Verdict, error) {
	in, inNotes, err := readCommitted(ctx, brokers, input, opts...)
	if err != nil {
		return Verdict{}, err
	}
	out, notes, err := readCommitted(ctx, brokers, output, opts...)
	if err != nil {
		return Verdict{}, err
	}
	var v Verdict
	switch job {
	case "balance":
		v = checkBalance(in, out)
	case "wordcount":
		v = checkWordcount(in, out)
	default:
		v = checkCount(in, out)
	}
	v.Notes = append(inNotes, notes...)
	return v, nil
}

// checkCount checks count output: per key, the counts 1..n once each (n the
// key's input records), each after the one before it in its partition and
// with the sum of the key's first inputs up to it (a key's input is in one
// partition, in order), and a final sum equal to the sum of its inputs.
func checkCount(in, out []*kgo.Record) Verdict {
	v := Verdict{In: int64(len(in)), Out: int64(len(out)), job: "count"}
	prefix := map[string][]int64{} // key -> sum of its first c inputs, at c
	for _, r := range in {
		x, err := count.Decode(r)
		if err != nil {
			v.BadInput++
			continue
		}
		p := prefix[x.Key]
		if p == nil {
			p = []int64{0}
		}
		prefix[x.Key] = append(p, p[len(p)-1]+x.N)
	}
	seen := map[string]map[int64]int{}
	finalSum := map[string]count.Out{}
	last := map[keyIn]int64{}
	for _, r := range out {
		var o count.Out
		if err := json.Unmarshal(r.Value, &o); err != nil || o.Key == "" || string(r.Key) != o.Key {
			v.Malformed++
			continue
		}
		if seen[o.Key] == nil {
			seen[o.Key] = map[int64]int{}
		}
		seen[o.Key][o.Count]++
		if o.Count >= finalSum[o.Key].Count {
			finalSum[o.Key] = o
		}
		if seen[o.Key][o.Count] > 1 {
			continue // a duplicate, counted below
		}
		at := keyIn{o.Key, r.Partition}
		n := int64(len(prefix[o.Key]) - 1)
		if o.Count != last[at]+1 || (o.Count <= n && o.Sum != prefix[o.Key][o.Count]) {
			v.OutOfOrder++
		}
		last[at] = max(last[at], o.Count)
	}
	for k, p := range prefix {
		n := int64(len(p) - 1)
		for c := int64(1); c <= n; c++ {
			switch m := seen[k][c]; {
			case m == 0:
				v.Missing++
			case m > 1:
				v.Duplicates += int64(m - 1)
			}
		}
		if finalSum[k].Sum != p[n] || finalSum[k].Count != n {
			v.WrongTotals++
		}
	}
	// Counts past a key's input (or keys never in the input) are effects
	// of records applied more than once.
	for k, counts := range seen {
		for c, m := range counts {
			if c < 1 || c > int64(len(prefix[k])-1) {
				v.Duplicates += int64(m)
			}
		}
	}
	return v
}

// keyIn is a key in one output partition.
type keyIn struct {
	key       string
	partition int32
}

// checkWordcount checks word counts: for each word of the input lines, the
// output has its counts 1..n, each once and each after the one before it
// in its partition (In counts words).
func checkWordcount(in, out []*kgo.Record) Verdict {
	want := map[string]int64{}
	for _, r := range in {
		for _, w := range wordcount.Words(string(r.Value)) {
			want[w]++
		}
	}
	v := Verdict{Out: int64(len(out)), job: "wordcount"}
	seen := map[string]map[int64]int{}
	last := map[string]int64{}
	lastIn := map[keyIn]int64{}
	for _, r := range out {
		var o wordcount.Out
		if err := json.Unmarshal(r.Value, &o); err != nil || o.Word == "" || string(r.Key) != o.Word {
			v.Malformed++
			continue
		}
		if seen[o.Word] == nil {
			seen[o.Word] = map[int64]int{}
		}
		seen[o.Word][o.Count]++
		last[o.Word] = max(last[o.Word], o.Count)
		if seen[o.Word][o.Count] > 1 {
			continue
		}
		at := keyIn{o.Word, r.Partition}
		if o.Count != lastIn[at]+1 {
			v.OutOfOrder++
		}
		lastIn[at] = max(lastIn[at], o.Count)
	}
	for w, n := range want {
		v.In += n
		for c := int64(1); c <= n; c++ {
			switch m := seen[w][c]; {
			case m == 0:
				v.Missing++
			case m > 1:
				v.Duplicates += int64(m - 1)
			}
		}
		if last[w] != n {
			v.WrongTotals++
		}
	}
	for w, counts := range seen {
		for c, m := range counts {
			if c < 1 || c > want[w] {
				v.Duplicates += int64(m)
			}
		}
	}
	return v
}

// checkBalance checks balance output: every transfer id once, each balance
// that of its account's transfers up to it in input order (an account's
// transfers are in one input partition, its balances in one output
// partition, in order), and each account's last balance equal to the sum
// of its transfers.
func checkBalance(in, out []*kgo.Record) Verdict {
	v := Verdict{In: int64(len(in)), Out: int64(len(out)), job: "balance"}
	type step struct {
		account string
		index   int   // the transfer's place among its account's
		balance int64 // the account's balance right after it
	}
	want := map[string]int64{}    // account -> balance
	transfers := map[string]int{} // account -> its transfers so far
	steps := map[string]step{}    // transfer id -> its step
	ids := map[string]int{}       // transfer id -> outputs
	for _, r := range in {
		t, err := balance.Decode(r)
		if err != nil {
			v.BadInput++
			continue
		}
		want[t.Account] += t.Amount
		steps[t.ID] = step{account: t.Account, index: transfers[t.Account], balance: want[t.Account]}
		transfers[t.Account]++
		ids[t.ID] = 0
	}
	last := map[string]int64{}
	next := map[keyIn]int{}
	for _, r := range out {
		var b balance.Balance
		if err := json.Unmarshal(r.Value, &b); err != nil || b.Account == "" || string(r.Key) != b.Account {
			v.Malformed++
			continue
		}
		n, known := ids[b.TransferID]
		if !known || n > 0 {
			v.Duplicates++ // applied again, or a transfer that was never input
		}
		ids[b.TransferID] = n + 1
		last[b.Account] = b.Balance
		if !known || n > 0 {
			continue
		}
		s, at := steps[b.TransferID], keyIn{b.Account, r.Partition}
		if s.account != b.Account || s.index != next[at] || s.balance != b.Balance {
			v.OutOfOrder++
		}
		next[at] = max(next[at], s.index+1)
	}
	for _, n := range ids {
		if n == 0 {
			v.Missing++
		}
	}
	for acc, w := range want {
		if last[acc] != w {
			v.WrongTotals++
		}
	}
	return v
}

// readCommitted reads every committed record of topic up to its last
// stable offsets at the time of the call, in partition order. Control
// records (transaction markers) are kept while reading, so that reaching the
// last stable offset is seen even when a marker is the last record before
// it; they are not returned. Notes say when open transactions hold records
// back (last stable offset below the high watermark). Its clients add opts
// to brokers.
func readCommitted(ctx context.Context, brokers []string, topic string, opts ...kgo.Opt) ([]*kgo.Record, []string, error) {
	acl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		return nil, nil, err
	}
	defer acl.Close()
	adm := kadm.NewClient(acl)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("start offsets of %s: %w", topic, err)
	}
	stable, err := adm.ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = stable.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("last stable offsets of %s: %w", topic, err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	if len(stable[topic]) == 0 {
		return nil, nil, fmt.Errorf("topic %s: no partitions (does it exist?)", topic)
	}
	var notes []string
	from := map[int32]kgo.Offset{}
	until := map[int32]int64{} // partition -> last offset to read
	parts := slices.Sorted(func(yield func(int32) bool) {
		for p := range stable[topic] {
			if !yield(p) {
				return
			}
		}
	})
	for _, p := range parts {
		s, _ := starts.Lookup(topic, p)
		lso, _ := stable.Lookup(topic, p)
		if e, ok := ends.Lookup(topic, p); ok && e.Offset > lso.Offset {
			notes = append(notes, fmt.Sprintf("%s/%d: last stable offset %d < high watermark %d: %d offsets belong to open transactions and are not checked",
				topic, p, lso.Offset, e.Offset, e.Offset-lso.Offset))
		}
		if lso.Offset > s.Offset {
			from[p] = kgo.NewOffset().At(s.Offset)
			until[p] = lso.Offset - 1
		}
	}
	byPart := map[int32][]*kgo.Record{}
	if len(from) > 0 {
		cl, err := kgo.NewClient(append([]kgo.Opt{
			kgo.SeedBrokers(brokers...),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.KeepControlRecords(),
		}, opts...)...)
		if err != nil {
			return nil, nil, err
		}
		defer cl.Close()
		for len(until) > 0 {
			fs := cl.PollFetches(ctx)
			if err := ctx.Err(); err != nil {
				return nil, nil, fmt.Errorf("read %s: %d partitions not read to their last stable offset: %w", topic, len(until), err)
			}
			if err := fs.Err(); err != nil {
				return nil, nil, fmt.Errorf("read %s: %w", topic, err)
			}
			fs.EachRecord(func(r *kgo.Record) {
				last, reading := until[r.Partition]
				if !reading || r.Offset > last {
					return
				}
				if !r.Attrs.IsControl() {
					byPart[r.Partition] = append(byPart[r.Partition], r)
				}
				if r.Offset == last {
					delete(until, r.Partition)
				}
			})
		}
	}
	var out []*kgo.Record
	for _, p := range parts {
		out = append(out, byPart[p]...)
	}
	return out, notes, nil
}
