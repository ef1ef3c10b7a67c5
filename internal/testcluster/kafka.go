package testcluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Provider names, as logged and as found in Cluster.Provider / Bucket.Provider.
const (
	ProviderEnv            = "env"
	ProviderTestcontainers = "testcontainers"
	ProviderInProcess      = "in-process" // kfake, gofakes3
)

// Cluster is a Kafka cluster a test may use.
type Cluster struct {
	Brokers  []string // bootstrap addresses, host:port
	Provider string   // ProviderEnv, ProviderTestcontainers or ProviderInProcess

	// Fake is the in-process cluster when Provider is ProviderInProcess, for
	// tests that inject faults with kfake's control functions; nil otherwise.
	Fake *kfake.Cluster
}

// Kafka returns a Kafka cluster for t from the first available provider (see
// the package doc) and logs which one. It fails t if KAFKA_BROKERS is set but
// does not answer, or if an opted-in container does not start.
func Kafka(t testing.TB) *Cluster {
	t.Helper()
	if env := os.Getenv("KAFKA_BROKERS"); env != "" {
		c := &Cluster{Brokers: splitList(env), Provider: ProviderEnv}
		if err := c.ping(t); err != nil {
			t.Fatalf("KAFKA_BROKERS=%s does not answer: %v", env, err)
		}
		t.Logf("kafka provider: %s (KAFKA_BROKERS=%s)", c.Provider, env)
		return c
	}
	if why, ok := containersWanted(); ok {
		brokers, image := startKafkaContainer(t)
		t.Logf("kafka provider: %s (%s at %s)", ProviderTestcontainers, image, strings.Join(brokers, ","))
		return &Cluster{Brokers: brokers, Provider: ProviderTestcontainers}
	} else if why != "" {
		t.Logf("kafka: not using testcontainers: %s", why)
	}

	fake, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(1),
	)
	if err != nil {
		t.Fatalf("start kfake: %v", err)
	}
	t.Cleanup(fake.Close)
	c := &Cluster{Brokers: fake.ListenAddrs(), Provider: ProviderInProcess, Fake: fake}
	t.Logf("kafka provider: %s (kfake at %s; set KAFKA_BROKERS to test a real broker)",
		c.Provider, strings.Join(c.Brokers, ","))
	return c
}

// Client returns a client seeded with the cluster's brokers plus opts, closed
// when t ends.
func (c *Cluster) Client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.Brokers...)}, opts...)...)
	if err != nil {
		t.Fatalf("new kafka client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Admin returns an admin client for the cluster, closed when t ends.
func (c *Cluster) Admin(t testing.TB) *kadm.Client {
	t.Helper()
	return kadm.NewClient(c.Client(t))
}

// CreateTopics creates topics with the given number of partitions and the
// broker's default replication factor, failing t on any error (an existing
// topic included: names should come from UniqueName).
func (c *Cluster) CreateTopics(t testing.TB, partitions int32, topics ...string) {
	t.Helper()
	c.CreateTopicsWith(t, partitions, nil, topics...)
}

// CreateTopicsWith is CreateTopics with topic configs, such as
// retention.ms -1 for records whose timestamps are older than the
// broker's retention (which deletes them at its next check).
func (c *Cluster) CreateTopicsWith(t testing.TB, partitions int32, configs map[string]*string, topics ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.Admin(t).CreateTopics(ctx, partitions, -1, configs, topics...)
	if err != nil {
		t.Fatalf("create topics %v: %v", topics, err)
	}
	for _, r := range resp.Sorted() {
		if r.Err != nil {
			t.Fatalf("create topic %s (%d partitions): %v", r.Topic, partitions, r.Err)
		}
	}
}

// ping asks for metadata, so a wrong KAFKA_BROKERS fails fast and clearly
// instead of as a timeout deep inside a test.
func (c *Cluster) ping(t testing.TB) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	m, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	if err != nil {
		return err
	}
	if len(m.Brokers) == 0 {
		return errors.New("metadata lists no brokers")
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// KafkaWith starts a real broker of t's own with the given broker
// properties (scripts/kafka, WEIR_KAFKA_PROPERTIES), for a test that needs
// a broker set otherwise than the shared one (a short
// transactional.id.expiration.ms, say), and stops it when t ends. Like
// SecureKafka it needs java: without, it skips t, unless
// WEIR_REQUIRE_JAVA=1.
func KafkaWith(t testing.TB, properties map[string]string) *Cluster {
	t.Helper()
	requireJava(t)
	dir := t.TempDir()
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(properties)) {
		fmt.Fprintf(&b, "%s=%s\n", k, properties[k])
	}
	file := filepath.Join(dir, "extra.properties")
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, _ := ownBroker(t, filepath.Join(dir, "kafka"), "WEIR_KAFKA_PROPERTIES="+file)
	return &Cluster{Brokers: []string{addr}, Provider: ProviderEnv}
}
