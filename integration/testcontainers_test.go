package integration

import (
	"os"
	"testing"

	"github.com/testcontainers/testcontainers-go"

	"github.com/weirstream/weir/internal/testcluster"
)

// TestContainers runs the plumbing checks against an apache/kafka and a MinIO
// container. It is opt-in (WEIR_TESTCONTAINERS=1) because it pulls images,
// and skips without a healthy Docker engine.
func TestContainers(t *testing.T) {
	if os.Getenv("WEIR_TESTCONTAINERS") != "1" {
		t.Skip("set WEIR_TESTCONTAINERS=1 (with a Docker engine that can pull apache/kafka and minio/minio) to run")
	}
	testcontainers.SkipIfProviderIsNotHealthy(t)
	// This test is about the containers: an external broker or endpoint in
	// the environment must not take precedence.
	t.Setenv("KAFKA_BROKERS", "")
	t.Setenv("WEIR_S3_ENDPOINT", "")

	c := testcluster.Kafka(t)
	if c.Provider != testcluster.ProviderTestcontainers {
		t.Fatalf("kafka provider = %s, want %s", c.Provider, testcluster.ProviderTestcontainers)
	}
	t.Run("transactions", func(t *testing.T) { checkTransactions(t, c) })
	t.Run("fencing", func(t *testing.T) { checkFencing(t, c) })

	b := testcluster.S3(t)
	if b.Provider != testcluster.ProviderTestcontainers {
		t.Fatalf("s3 provider = %s, want %s", b.Provider, testcluster.ProviderTestcontainers)
	}
	t.Run("s3", func(t *testing.T) { checkS3(t, b) })
}
