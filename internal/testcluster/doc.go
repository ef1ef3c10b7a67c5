// Package testcluster gives integration tests a Kafka cluster and an S3 bucket
// without caring where they come from.
//
// Every test that needs Kafka calls [Kafka]; every test that needs S3 calls
// [S3]. Each picks the first provider that is available, in this order, and
// logs which one it picked ("kafka provider: ...", "s3 provider: ..."):
//
//  1. An external service named by the environment: KAFKA_BROKERS
//     (comma-separated host:port list, e.g. from scripts/kafka start), or
//     WEIR_S3_ENDPOINT (+ WEIR_S3_BUCKET, WEIR_S3_REGION, WEIR_S3_ACCESS_KEY,
//     WEIR_S3_SECRET_KEY; without keys the SDK's default credential chain is
//     used).
//  2. A container, only when WEIR_TESTCONTAINERS=1 and a Docker engine answers:
//     apache/kafka (KRaft, single node; WEIR_KAFKA_IMAGE overrides the image)
//     and MinIO (WEIR_MINIO_IMAGE). Opt-in, since an engine that cannot reach a
//     registry cannot pull images. Without a healthy engine the helpers fall
//     through to 3; they never skip the calling test.
//  3. In process: franz-go's kfake for Kafka, gofakes3 served over real HTTP
//     on 127.0.0.1 for S3. Always available, so `go test ./...` passes on a
//     machine with nothing installed.
//
// A test of TLS and SASL calls [SecureKafka] instead: it always starts a
// real broker of the test's own (scripts/kafka, with a SASL_SSL listener,
// certificates and users made for the test), and skips without java.
//
// The fakes are lenient where a real broker is strict (transaction edge cases,
// error codes under transaction protocol v2), so a test that depends on exact
// broker behaviour should be run against KAFKA_BROKERS too; CI does.
//
// Duties of the caller:
//   - Treat the cluster as shared. An external broker or bucket outlives the
//     test and is used by other tests: create topics, transactional ids,
//     group ids and object keys with [UniqueName] (or under [Bucket.Prefix]),
//     never fixed names.
//   - Do not close what the helpers return: containers, fakes and clients made
//     by the helpers are released with t.Cleanup.
//   - Create topics explicitly with [Cluster.CreateTopics] when the partition
//     count matters; auto-creation gives one partition on every provider.
package testcluster
