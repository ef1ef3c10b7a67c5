package integration

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// composeFile is the part of docker-compose.yml this test checks.
type composeFile struct {
	Services map[string]composeService `yaml:"services"`
}

type composeService struct {
	Image       string        `yaml:"image"`
	Build       *composeBuild `yaml:"build"`
	Command     stringOrList  `yaml:"command"`
	Environment composeEnv    `yaml:"environment"`
	Ports       []string      `yaml:"ports"`
	DependsOn   composeDeps   `yaml:"depends_on"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
}

type composeBuild struct {
	Context    string `yaml:"context"`
	Dockerfile string `yaml:"dockerfile"`
}

// composeEnv accepts both compose spellings: a map or a list of KEY=VALUE.
type composeEnv map[string]string

func (e *composeEnv) UnmarshalYAML(n *yaml.Node) error {
	m := map[string]string{}
	switch n.Kind {
	case yaml.MappingNode:
		if err := n.Decode(&m); err != nil {
			return err
		}
	case yaml.SequenceNode:
		var list []string
		if err := n.Decode(&list); err != nil {
			return err
		}
		for _, kv := range list {
			k, v, _ := strings.Cut(kv, "=")
			m[k] = v
		}
	default:
		return fmt.Errorf("line %d: environment must be a map or a list", n.Line)
	}
	*e = m
	return nil
}

// composeDeps accepts depends_on as a list of services or as a map from
// service to condition.
type composeDeps []string

func (d *composeDeps) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.MappingNode {
		var m map[string]any
		if err := n.Decode(&m); err != nil {
			return err
		}
		*d = keys(m)
		return nil
	}
	var list []string
	err := n.Decode(&list)
	*d = list
	return err
}

// stringOrList accepts a command as a list or as one shell-split string.
type stringOrList []string

func (s *stringOrList) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*s = strings.Fields(n.Value)
		return nil
	}
	var list []string
	err := n.Decode(&list)
	*s = list
	return err
}

// TestComposeFile keeps docker-compose.yml runnable without Docker here:
// the services exist and agree with each other (the worker reaches the
// broker on an advertised listener and MinIO by its service name) and the
// worker's image is built from this repo's Dockerfile.
func TestComposeFile(t *testing.T) {
	const root = ".."
	raw, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var f composeFile
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatalf("parse docker-compose.yml: %v", err)
	}
	for _, name := range []string{"kafka", "minio", "worker"} {
		if _, ok := f.Services[name]; !ok {
			t.Fatalf("docker-compose.yml has no service %q (has %v)", name, keys(f.Services))
		}
	}
	kafka, minio, worker := f.Services["kafka"], f.Services["minio"], f.Services["worker"]

	t.Run("kafka", func(t *testing.T) {
		if !strings.HasPrefix(kafka.Image, "apache/kafka:") {
			t.Errorf("image = %q, want apache/kafka:<version>", kafka.Image)
		}
		env := kafka.Environment
		roles := strings.Split(env["KAFKA_PROCESS_ROLES"], ",")
		if !slices.Contains(roles, "broker") || !slices.Contains(roles, "controller") {
			t.Errorf("KAFKA_PROCESS_ROLES = %q, want broker,controller (single-node KRaft)", env["KAFKA_PROCESS_ROLES"])
		}
		// One broker: internal topics must not ask for more replicas, or
		// transactions and consumer groups never become available.
		for _, k := range []string{
			"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR",
			"KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR",
			"KAFKA_TRANSACTION_STATE_LOG_MIN_ISR",
		} {
			if env[k] != "1" {
				t.Errorf("%s = %q, want 1", k, env[k])
			}
		}
		if env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == "" && env["KAFKA_CONTROLLER_QUORUM_BOOTSTRAP_SERVERS"] == "" {
			t.Error("no KAFKA_CONTROLLER_QUORUM_VOTERS or _BOOTSTRAP_SERVERS")
		}
		if kafka.Healthcheck == nil || len(kafka.Healthcheck.Test) == 0 {
			t.Error("no healthcheck: the worker cannot wait for a usable broker")
		}
	})

	t.Run("minio", func(t *testing.T) {
		if !strings.HasPrefix(minio.Image, "minio/minio:") {
			t.Errorf("image = %q, want minio/minio:<release>", minio.Image)
		}
		if !slices.Contains(minio.Command, "server") {
			t.Errorf("command = %q, want a minio server", minio.Command)
		}
		if minio.Environment["MINIO_ROOT_USER"] == "" || minio.Environment["MINIO_ROOT_PASSWORD"] == "" {
			t.Error("MINIO_ROOT_USER / MINIO_ROOT_PASSWORD not set")
		}
		if minio.Healthcheck == nil || len(minio.Healthcheck.Test) == 0 {
			t.Error("no healthcheck")
		}
	})

	t.Run("worker", func(t *testing.T) {
		if worker.Build == nil {
			t.Fatal("worker has no build section: it must be built from this repo")
		}
		dockerfile := filepath.Join(root, worker.Build.Context, worker.Build.Dockerfile)
		if worker.Build.Dockerfile == "" {
			dockerfile = filepath.Join(root, worker.Build.Context, "Dockerfile")
		}
		df, err := os.ReadFile(dockerfile)
		if err != nil {
			t.Fatalf("worker's Dockerfile: %v", err)
		}
		if !strings.Contains(string(df), "./cmd/processor") {
			t.Errorf("%s does not build ./cmd/processor", dockerfile)
		}
		if len(worker.Command) == 0 || worker.Command[0] != "run" {
			t.Errorf("command = %q, want processor's run subcommand", worker.Command)
		}
		for _, dep := range []string{"kafka", "minio"} {
			if !dependsOn(f, "worker", dep) {
				t.Errorf("worker does not depend on %s (directly or through an init service)", dep)
			}
		}

		// processor takes --brokers from WEIR_BROKERS.
		brokers := worker.Environment["WEIR_BROKERS"]
		if brokers == "" {
			t.Fatal("worker has no WEIR_BROKERS")
		}
		advertised := kafka.Environment["KAFKA_ADVERTISED_LISTENERS"]
		for _, b := range strings.Split(brokers, ",") {
			if !strings.Contains(advertised, "//"+b) {
				t.Errorf("worker's broker %s is not one of kafka's advertised listeners %s", b, advertised)
			}
		}
		ep, err := url.Parse(worker.Environment["AWS_ENDPOINT_URL_S3"])
		if err != nil || ep.Hostname() != "minio" {
			t.Errorf("AWS_ENDPOINT_URL_S3 = %q, want the minio service", worker.Environment["AWS_ENDPOINT_URL_S3"])
		}
		if worker.Environment["AWS_ACCESS_KEY_ID"] != minio.Environment["MINIO_ROOT_USER"] {
			t.Error("worker's AWS_ACCESS_KEY_ID does not match MINIO_ROOT_USER")
		}
	})
}

// dependsOn reports whether service from reaches to through depends_on.
func dependsOn(f composeFile, from, to string) bool {
	seen := map[string]bool{}
	var walk func(string) bool
	walk = func(s string) bool {
		if seen[s] {
			return false
		}
		seen[s] = true
		for _, dep := range f.Services[s].DependsOn {
			if dep == to || walk(dep) {
				return true
			}
		}
		return false
	}
	return walk(from)
}

func keys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
