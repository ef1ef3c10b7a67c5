package main

import (
	"net"
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/cli"
	"github.com/weirstream/weir/worker"
)

// TestComposeWorkerSettings: the worker's environment in docker-compose.yml
// is a valid `processor run` configuration, every WEIR_ variable in it names
// a flag (an unknown one would be silently ignored), and its s3://
// checkpoints find their endpoint where the compose file puts it.
func TestComposeWorkerSettings(t *testing.T) {
	raw, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Services map[string]struct {
			Environment map[string]string `yaml:"environment"`
			Ports       []string          `yaml:"ports"`
			Healthcheck struct {
				Test []string `yaml:"test"`
			} `yaml:"healthcheck"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatalf("parse docker-compose.yml: %v", err)
	}
	svc, ok := f.Services["worker"]
	if !ok {
		t.Fatal("docker-compose.yml has no worker service")
	}
	environ := svc.Environment

	fs := cli.NewFlagSet("processor run", "", &strings.Builder{})
	c := worker.DefaultConfig()
	c.RegisterFlags(fs)
	for k := range environ {
		name, ok := strings.CutPrefix(k, "WEIR_")
		if !ok {
			continue
		}
		flag := strings.ToLower(strings.ReplaceAll(name, "_", "-"))
		if fs.Lookup(flag) == nil {
			t.Errorf("worker sets %s, but processor run has no --%s", k, flag)
		}
	}

	var stderr strings.Builder
	cfg, err := worker.Parse(nil, func(k string) (string, bool) { v, ok := environ[k]; return v, ok }, &stderr)
	if err != nil {
		t.Fatalf("the worker's environment is not a valid configuration: %v\n%s", err, stderr.String())
	}
	if cfg.StateBackend != "pebble" {
		t.Errorf("worker's state backend %q, want pebble", cfg.StateBackend)
	}
	if !strings.HasPrefix(cfg.Checkpoints, "s3://") {
		t.Fatalf("worker's checkpoints %q, want s3:// (MinIO)", cfg.Checkpoints)
	}
	// The endpoint comes from the URI or from AWS_ENDPOINT_URL_S3 (read by
	// the SDK), which also turns on path-style addressing.
	for k, v := range environ {
		if strings.HasPrefix(k, "AWS_") {
			t.Setenv(k, v)
		}
	}
	t.Setenv("WEIR_S3_ENDPOINT", "")
	opts, err := checkpoint.S3OptionsFromURI(cfg.Checkpoints)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Endpoint == "" && environ["AWS_ENDPOINT_URL_S3"] == "" && environ["AWS_ENDPOINT_URL"] == "" {
		t.Error("no S3 endpoint: neither endpoint= in WEIR_CHECKPOINTS nor AWS_ENDPOINT_URL_S3")
	}
	if !opts.PathStyle {
		t.Error("MinIO needs path-style addressing, and the worker's settings do not give it")
	}
	if environ["AWS_REGION"] == "" && opts.Region == "" {
		t.Error("no region: set AWS_REGION or region= in WEIR_CHECKPOINTS")
	}
	if environ["AWS_ACCESS_KEY_ID"] == "" || environ["AWS_SECRET_ACCESS_KEY"] == "" {
		t.Error("no credentials for the default chain: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
	}

	// The replicas share the tasks through the group: a static task list
	// would make every replica run every task.
	if len(cfg.Tasks) > 0 || cfg.Epoch != 0 {
		t.Errorf("worker sets tasks %v / epoch %d: the replicas must get their tasks from the group", cfg.Tasks, cfg.Epoch)
	}
	// The status page listens on all interfaces inside the container, on
	// the port the service publishes (any host port, so --scale works) and
	// the healthcheck probes.
	host, port, err := net.SplitHostPort(cfg.HTTPAddr)
	if err != nil || host != "0.0.0.0" {
		t.Errorf("WEIR_HTTP_ADDR %q: want 0.0.0.0:PORT, reachable from outside the container", cfg.HTTPAddr)
	}
	published := false
	for _, p := range svc.Ports {
		parts := strings.Split(p, ":")
		if parts[len(parts)-1] == port {
			published = true
			if len(parts) == 3 && parts[1] != "" {
				t.Errorf("port %q publishes a fixed host port: --scale worker=3 would collide", p)
			}
		}
	}
	if !published {
		t.Errorf("container port %s is not published (ports %v)", port, svc.Ports)
	}
	hc := svc.Healthcheck.Test
	if len(hc) < 3 || hc[1] != "/usr/local/bin/processor" || hc[2] != "probe" || !strings.Contains(strings.Join(hc, " "), ":"+port+"/readyz") {
		t.Errorf("healthcheck %q: want processor probe of /readyz on port %s", hc, port)
	}
}
