package integration

import (
	"os"
	"testing"

	"github.com/weirstream/weir/internal/testcluster"
)

// TestContainers runs the plumbing checks and the exactly-once scenarios
// against one apache/kafka and one MinIO container (testcluster's pinned
// images): kill -9 of the two static workers, and the chaos of a group of
// workers (kill -9, new workers, SIGTERM, SIGSTOP), each with Pebble state
// and checkpoints in the MinIO bucket. The workers are processes on this
// host and reach both containers through their mapped ports. It is opt-in
// (WEIR_TESTCONTAINERS=1) because it pulls images, and skips without a
// healthy Docker engine. Pulls and both scenarios take longer than go test's
// default 10m limit:
//
//	WEIR_TESTCONTAINERS=1 go test -race -count=1 -timeout 40m -v -run TestContainers ./integration/
func TestContainers(t *testing.T) {
	if os.Getenv("WEIR_TESTCONTAINERS") != "1" {
		t.Skip("set WEIR_TESTCONTAINERS=1 (with a Docker engine that can pull " +
			testcluster.DefaultKafkaImage + " and " + testcluster.DefaultMinIOImage + ") to run")
	}
	if err := testcluster.DockerHealthy(); err != nil {
		t.Skipf("WEIR_TESTCONTAINERS=1 but Docker is not usable: %v", err)
	}
	// This test is about the containers: an external broker or endpoint in
	// the environment must not take precedence.
	t.Setenv("KAFKA_BROKERS", "")
	t.Setenv("WEIR_S3_ENDPOINT", "")

	c := testcluster.Kafka(t)
	if c.Provider != testcluster.ProviderTestcontainers {
		t.Fatalf("kafka provider = %s, want %s", c.Provider, testcluster.ProviderTestcontainers)
	}
	b := testcluster.S3(t)
	if b.Provider != testcluster.ProviderTestcontainers {
		t.Fatalf("s3 provider = %s, want %s", b.Provider, testcluster.ProviderTestcontainers)
	}

	// The subtests share the containers as tests share a CI broker: their
	// topics, ids and object keys are their own.
	t.Run("transactions", func(t *testing.T) { checkTransactions(t, c) })
	t.Run("fencing", func(t *testing.T) { checkFencing(t, c) })
	t.Run("s3", func(t *testing.T) { checkS3(t, prefixed(t, b)) })
	t.Run("kill-nine", func(t *testing.T) { testKillNine(t, c, prefixed(t, b)) })
	t.Run("group-chaos", func(t *testing.T) { testGroupChaos(t, c, prefixed(t, b)) })
}

// prefixed returns b with a prefix of t's own, as testcluster.S3(t) would
// give it: checkS3 lists everything under its prefix.
func prefixed(t *testing.T, b *testcluster.Bucket) *testcluster.Bucket {
	own := *b
	own.Prefix = testcluster.UniqueName(t, "") + "/"
	return &own
}
