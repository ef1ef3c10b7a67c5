// Command kafkaready waits until a Kafka broker answers a metadata request and
// an ApiVersions request, then prints the broker's finalized feature levels
// (metadata.version, transaction.version, ...) and exits 0. scripts/kafka uses
// it to decide that a freshly started broker is usable; it exits 1 when the
// deadline passes first.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "comma-separated bootstrap addresses")
	timeout := flag.Duration("timeout", 5*time.Second, "give up after this long")
	quiet := flag.Bool("q", false, "print nothing on success")
	flag.Parse()

	features, err := wait(strings.Split(*brokers, ","), *timeout)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kafkaready: %s: %v\n", *brokers, err)
		os.Exit(1)
	}
	if !*quiet {
		fmt.Println(features)
	}
}

// wait polls until the deadline; a broker that is still starting refuses
// connections or answers without brokers, and both are retried.
func wait(seeds []string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DialTimeout(2*time.Second))
	if err != nil {
		return "", err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		features, err := probe(ctx, adm)
		if err == nil {
			return features, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("not ready after %s: %w", timeout, err)
		case <-tick.C:
		}
	}
}

func probe(ctx context.Context, adm *kadm.Client) (string, error) {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	vs, err := adm.ApiVersions(rctx)
	if err != nil {
		return "", err
	}
	if len(vs) == 0 {
		return "", errors.New("metadata lists no brokers")
	}
	var lines []string
	for _, v := range vs.Sorted() {
		if v.Err != nil {
			return "", fmt.Errorf("broker %d: %w", v.NodeID, v.Err)
		}
		var fs []string
		for _, f := range v.Raw().FinalizedFeatures {
			fs = append(fs, fmt.Sprintf("%s=%d", f.Name, f.MaxVersionLevel))
		}
		sort.Strings(fs)
		lines = append(lines, fmt.Sprintf("broker %d finalized features: %s", v.NodeID, strings.Join(fs, " ")))
	}
	return strings.Join(lines, "\n"), nil
}
