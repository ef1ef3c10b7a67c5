package testcluster

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/modules/minio"
	"github.com/testcontainers/testcontainers-go/wait"
)

// Images used when WEIR_TESTCONTAINERS=1; WEIR_KAFKA_IMAGE and
// WEIR_MINIO_IMAGE override them. The MinIO release must be new enough to
// honour If-None-Match on PutObject (late 2024 on).
const (
	DefaultKafkaImage = "apache/kafka:4.1.1"
	DefaultMinIOImage = "minio/minio:RELEASE.2025-04-22T22-12-26Z"
)

// containerStartTimeout bounds starting one container, pull included: a
// first run on a slow link spends most of it pulling. Readiness once the
// container runs has its own, shorter bound.
const containerStartTimeout = 10 * time.Minute

var (
	dockerOnce sync.Once
	dockerErr  error
)

// containersWanted reports whether to start containers. When the caller
// opted in but Docker is not usable it returns false and the reason, so the
// helper can log it and fall through to the in-process fakes.
func containersWanted() (why string, ok bool) {
	if os.Getenv("WEIR_TESTCONTAINERS") != "1" {
		return "", false
	}
	if err := DockerHealthy(); err != nil {
		return fmt.Sprintf("WEIR_TESTCONTAINERS=1 but Docker is not usable: %v", err), false
	}
	return "", true
}

// DockerHealthy reports whether a Docker engine answers, with
// testcontainers.SkipIfProviderIsNotHealthy's checks but returning the reason
// instead of skipping. The answer is computed once per test binary.
func DockerHealthy() error {
	dockerOnce.Do(func() { dockerErr = checkDocker() })
	return dockerErr
}

func checkDocker() (err error) {
	// testcontainers panics on some broken Docker setups.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("docker provider panicked: %v", r)
		}
	}()
	p, err := testcontainers.ProviderDefault.GetProvider()
	if err != nil {
		return err
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return p.Health(ctx)
}

const kafkaStartScript = "/tmp/weir-start.sh"

// startKafkaContainer runs a single-node KRaft apache/kafka container. The
// advertised listener must carry the host port Docker picked, which exists
// only once the container runs, so the entrypoint waits for a start script
// that a post-start hook writes (as testcontainers' own Kafka module does).
// Brokers talk to themselves (transaction markers) over a separate in-
// container listener, since the host address is not reachable from inside.
func startKafkaContainer(t testing.TB) (brokers []string, image string) {
	t.Helper()
	image = envOr("WEIR_KAFKA_IMAGE", DefaultKafkaImage)
	ctx, cancel := context.WithTimeout(context.Background(), containerStartTimeout)
	defer cancel()

	req := testcontainers.ContainerRequest{
		Image:        image,
		ExposedPorts: []string{"9092/tcp"},
		Env: map[string]string{
			"KAFKA_NODE_ID":                                  "1",
			"KAFKA_PROCESS_ROLES":                            "broker,controller",
			"KAFKA_LISTENERS":                                "PLAINTEXT://0.0.0.0:9092,BROKER://0.0.0.0:9094,CONTROLLER://0.0.0.0:9093",
			"KAFKA_LISTENER_SECURITY_PROTOCOL_MAP":           "PLAINTEXT:PLAINTEXT,BROKER:PLAINTEXT,CONTROLLER:PLAINTEXT",
			"KAFKA_INTER_BROKER_LISTENER_NAME":               "BROKER",
			"KAFKA_CONTROLLER_LISTENER_NAMES":                "CONTROLLER",
			"KAFKA_CONTROLLER_QUORUM_VOTERS":                 "1@localhost:9093",
			"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR":         "1",
			"KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
			"KAFKA_TRANSACTION_STATE_LOG_MIN_ISR":            "1",
			"KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS":         "0",
			"KAFKA_NUM_PARTITIONS":                           "1",
		},
		Entrypoint: []string{"sh"},
		Cmd: []string{"-c", fmt.Sprintf(
			"while [ ! -f %[1]s ]; do sleep 0.1; done; exec sh %[1]s", kafkaStartScript)},
		WaitingFor: wait.ForLog("Kafka Server started").WithStartupTimeout(2 * time.Minute),
		LifecycleHooks: []testcontainers.ContainerLifecycleHooks{{
			PostStarts: []testcontainers.ContainerHook{
				func(ctx context.Context, c testcontainers.Container) error {
					addr, err := c.PortEndpoint(ctx, "9092/tcp", "")
					if err != nil {
						return err
					}
					script := fmt.Sprintf("export KAFKA_ADVERTISED_LISTENERS=PLAINTEXT://%s,BROKER://localhost:9094\n"+
						"exec /etc/kafka/docker/run\n", addr)
					return c.CopyToContainer(ctx, []byte(script), kafkaStartScript, 0o755)
				},
			},
		}},
	}
	ctr, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: req,
		Started:          true,
	})
	testcontainers.CleanupContainer(t, ctr)
	if err != nil {
		t.Fatalf("start %s container: %v", image, err)
	}
	addr, err := ctr.PortEndpoint(ctx, "9092/tcp", "")
	if err != nil {
		t.Fatalf("kafka container address: %v", err)
	}
	return []string{addr}, image
}

// startMinIOContainer runs MinIO and returns its endpoint URL and root
// credentials.
func startMinIOContainer(t testing.TB) (endpoint, user, password, image string) {
	t.Helper()
	image = envOr("WEIR_MINIO_IMAGE", DefaultMinIOImage)
	ctx, cancel := context.WithTimeout(context.Background(), containerStartTimeout)
	defer cancel()
	ctr, err := minio.Run(ctx, image)
	testcontainers.CleanupContainer(t, ctr)
	if err != nil {
		t.Fatalf("start %s container: %v", image, err)
	}
	hostPort, err := ctr.ConnectionString(ctx)
	if err != nil {
		t.Fatalf("minio container address: %v", err)
	}
	return "http://" + hostPort, ctr.Username, ctr.Password, image
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
