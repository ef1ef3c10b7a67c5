// Package integration holds weir's end-to-end tests. They take their Kafka
// cluster and S3 bucket from internal/testcluster, so the same tests run
// against a real broker (KAFKA_BROKERS, as CI does with scripts/kafka),
// containers (WEIR_TESTCONTAINERS=1) or the in-process fakes (the default).
// The package has no non-test code.
package integration
