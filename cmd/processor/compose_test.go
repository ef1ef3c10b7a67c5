package main

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/weirstream/weir/checkpoint"
	"github.com/weirstream/weir/internal/compose"
	"github.com/weirstream/weir/internal/testcluster"
	"github.com/weirstream/weir/worker"
)

// The deployment files are checked against the code that reads them: each
// service command of the processor image goes through the processor's own
// parser, with the service's environment as the only environment.

const (
	composePath    = "../../docker-compose.yml"
	dockerfilePath = "../../Dockerfile"
)

// processorService is a compose service that runs the processor image.
type processorService struct {
	name string
	svc  compose.Service
	sub  string // run, generate or verify
	// parsed is the configuration the processor parsed, one of
	// worker.Config, generateConfig, verifyConfig.
	parsed any
}

// deployment is what the checks share: the compose file, the Dockerfile's
// stages and the parsed processor services.
type deployment struct {
	f          *compose.File
	stages     []compose.Stage
	processors map[string]*processorService
}

func loadDeployment(t *testing.T) *deployment {
	t.Helper()
	f, err := compose.Load(composePath)
	if err != nil {
		t.Fatal(err)
	}
	stages, err := compose.ParseDockerfile(dockerfilePath)
	if err != nil {
		t.Fatal(err)
	}
	d := &deployment{f: f, stages: stages, processors: map[string]*processorService{}}
	for name, svc := range f.Services {
		if svc.Build == nil {
			continue
		}
		if svc.Build.Target != "processor" {
			t.Errorf("service %s builds target %q; only the processor image (target processor) is known to these checks", name, svc.Build.Target)
			continue
		}
		if len(svc.Command) == 0 {
			t.Errorf("service %s: no command; the image's default is run, but say it", name)
			continue
		}
		d.processors[name] = &processorService{name: name, svc: svc, sub: svc.Command[0]}
	}
	return d
}

// parseProcessor parses a processor service's command line and environment
// with the processor's parser of that subcommand and returns the settings
// and the WEIR_ variables the parser asked for.
func parseProcessor(sub string, args []string, env compose.Env) (any, map[string]bool, error) {
	asked := map[string]bool{}
	lookup := func(k string) (string, bool) {
		asked[k] = true
		return env.Lookup(k)
	}
	var stderr strings.Builder
	var cfg any
	var err error
	switch sub {
	case "run":
		cfg, err = worker.Parse(args, lookup, &stderr)
	case "generate":
		cfg, err = parseGenerate(args, lookup, &stderr)
	case "verify":
		cfg, err = parseVerify(args, lookup, &stderr)
	default:
		return nil, nil, fmt.Errorf("command %q is not one a service of this file should run (run, generate, verify)", sub)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%w\n%s", err, stderr.String())
	}
	return cfg, asked, nil
}

func TestComposeFile(t *testing.T) {
	d := loadDeployment(t)
	f := d.f

	t.Run("start order", func(t *testing.T) {
		if _, err := f.Order(); err != nil {
			t.Fatal(err)
		}
		for name, svc := range f.Services {
			for dep, cond := range svc.DependsOn {
				target := f.Services[dep]
				switch cond {
				case "service_healthy":
					if target.Healthcheck == nil {
						t.Errorf("%s waits for %s to be healthy, but %s has no healthcheck", name, dep, dep)
					}
				case "service_completed_successfully":
					if target.Replicas() != 1 || target.Restart == "always" || target.Restart == "unless-stopped" {
						t.Errorf("%s waits for %s to complete, but %s is not a one-shot service", name, dep, dep)
					}
				default:
					t.Errorf("%s depends on %s with condition %q: want service_healthy or service_completed_successfully, or it may start before %s is usable", name, dep, cond, dep)
				}
			}
		}
		for _, want := range [][2]string{
			{"kafka-init", "kafka"}, {"minio-init", "minio"},
			{"generator", "kafka-init"}, {"worker", "kafka-init"}, {"worker", "minio-init"},
			{"verify", "generator"},
		} {
			if !f.DependsOn(want[0], want[1]) {
				t.Errorf("%s does not depend on %s", want[0], want[1])
			}
		}
		if got := f.Services["verify"].DependsOn["generator"]; got != "service_completed_successfully" {
			t.Errorf("verify starts when the generator is %q: the verdict needs all the input written", got)
		}
		// Compose fails a dependency on a service's health once any of its
		// containers exited: a worker killed on purpose would fail verify.
		if got, ok := f.Services["verify"].DependsOn["worker"]; ok {
			t.Errorf("verify waits for the workers (%s): a worker killed on purpose would fail it; verify --wait waits for the output", got)
		}
	})

	t.Run("images pinned", func(t *testing.T) {
		for name, svc := range f.Services {
			if err := pinned(svc.Image); err != nil {
				t.Errorf("service %s: %v", name, err)
			}
		}
		names := map[string]bool{}
		for _, s := range d.stages {
			if s.Name != "" {
				names[s.Name] = true
			}
			if names[s.From] {
				continue // a stage of this file
			}
			if err := pinned(s.From); err != nil {
				t.Errorf("Dockerfile stage %s: %v", s.Name, err)
			}
		}
		kafka := f.Services["kafka"].Image
		repo, tag, _ := strings.Cut(kafka, ":")
		if repo != "apache/kafka" || !strings.HasPrefix(tag, "4.") {
			t.Errorf("kafka image %q, want apache/kafka:4.x", kafka)
		}
		if f.Services["kafka-init"].Image != kafka {
			t.Errorf("kafka-init runs %q, not the broker's image %q: its tools must match the broker", f.Services["kafka-init"].Image, kafka)
		}
		// The testcontainers suite runs the images the compose file runs.
		if kafka != testcluster.DefaultKafkaImage || f.Services["minio"].Image != testcluster.DefaultMinIOImage {
			t.Errorf("compose runs %s and %s, the testcontainers suite %s and %s", kafka, f.Services["minio"].Image, testcluster.DefaultKafkaImage, testcluster.DefaultMinIOImage)
		}
		if f.Services["minio-init"].Image != f.Services["minio"].Image {
			t.Errorf("minio-init runs %q, not MinIO's image %q", f.Services["minio-init"].Image, f.Services["minio"].Image)
		}
	})

	t.Run("kafka", func(t *testing.T) {
		env := f.Services["kafka"].Environment
		roles := strings.Split(env["KAFKA_PROCESS_ROLES"], ",")
		if !slices.Contains(roles, "broker") || !slices.Contains(roles, "controller") {
			t.Errorf("KAFKA_PROCESS_ROLES = %q, want broker,controller (single-node KRaft)", env["KAFKA_PROCESS_ROLES"])
		}
		// One broker: internal topics must not ask for more replicas, or
		// transactions and consumer groups never become available.
		for _, k := range []string{"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR", "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"} {
			if env[k] != "1" {
				t.Errorf("%s = %q, want 1", k, env[k])
			}
		}
		if env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == "" && env["KAFKA_CONTROLLER_QUORUM_BOOTSTRAP_SERVERS"] == "" {
			t.Error("no KAFKA_CONTROLLER_QUORUM_VOTERS or _BOOTSTRAP_SERVERS")
		}
		// The broker sends transaction markers to itself over the
		// inter-broker listener, which must be one of its listeners.
		inter := env["KAFKA_INTER_BROKER_LISTENER_NAME"]
		if inter == "" || !strings.Contains(env["KAFKA_LISTENERS"], inter+"://") || !strings.Contains(env["KAFKA_ADVERTISED_LISTENERS"], inter+"://") {
			t.Errorf("inter-broker listener %q is not both a listener and advertised", inter)
		}
	})

	t.Run("processor services", func(t *testing.T) {
		for _, name := range []string{"generator", "worker", "verify"} {
			if d.processors[name] == nil {
				t.Fatalf("no processor service %s (have %v)", name, mapKeys(d.processors))
			}
		}
		for _, p := range d.processors {
			cfg, asked, err := parseProcessor(p.sub, p.svc.Command[1:], p.svc.Environment)
			if err != nil {
				t.Errorf("service %s: processor %s does not accept its settings: %v", p.name, p.sub, err)
				continue
			}
			p.parsed = cfg
			for k := range p.svc.Environment {
				switch {
				case strings.HasPrefix(k, "WEIR_"):
					if !asked[k] {
						t.Errorf("service %s sets %s, which processor %s does not read: a typo would be ignored silently", p.name, k, p.sub)
					}
				case strings.HasPrefix(k, "AWS_"):
					if p.sub != "run" {
						t.Errorf("service %s sets %s, but only run reads checkpoint storage", p.name, k)
					}
				default:
					t.Errorf("service %s sets %s, which nothing in the processor reads", p.name, k)
				}
			}
		}
	})
	if t.Failed() {
		return
	}
	run := d.processors["worker"].parsed.(worker.Config)
	gen := d.processors["generator"].parsed.(generateConfig)
	ver := d.processors["verify"].parsed.(verifyConfig)

	t.Run("names agree", func(t *testing.T) {
		kafka := f.Services["kafka"].Environment
		topics, bootstrap := kafkaInitTopics(t, f.Services["kafka-init"])
		for _, b := range []struct {
			who     string
			brokers []string
		}{{"worker", run.Brokers}, {"generator", gen.Brokers}, {"verify", ver.Brokers}, {"kafka-init", []string{bootstrap}}} {
			for _, addr := range b.brokers {
				if !advertised(kafka["KAFKA_ADVERTISED_LISTENERS"], addr) {
					t.Errorf("%s reaches the broker at %s, which is not one of kafka's advertised listeners %s", b.who, addr, kafka["KAFKA_ADVERTISED_LISTENERS"])
				}
			}
		}
		if gen.Topic != run.Input || ver.Input != run.Input || ver.Output != run.Output {
			t.Errorf("topics disagree: generator writes %s, worker reads %s and writes %s, verify reads %s and %s", gen.Topic, run.Input, run.Output, ver.Input, ver.Output)
		}
		if gen.Job != run.Job || ver.Job != run.Job {
			t.Errorf("jobs disagree: generator %s, worker %s, verify %s", gen.Job, run.Job, ver.Job)
		}
		if gen.Create {
			t.Error("the generator creates its topic: kafka-init does, with the partitions the job needs")
		}
		for _, topic := range []string{run.Input, run.Output} {
			if _, ok := topics[topic]; !ok {
				t.Errorf("topic %s is not created by kafka-init (creates %v)", topic, topics)
			}
		}
		if n, w := topics[run.Input], f.Services["worker"].Replicas(); n < w {
			t.Errorf("%s has %d partitions (tasks) for %d workers: some would idle", run.Input, n, w)
		}
	})

	t.Run("checkpoints on minio", func(t *testing.T) {
		if run.StateBackend != "pebble" {
			t.Errorf("worker's state backend %q, want pebble", run.StateBackend)
		}
		if !strings.HasPrefix(run.Checkpoints, "s3://") {
			t.Fatalf("worker's checkpoints %q, want s3:// (MinIO)", run.Checkpoints)
		}
		env := f.Services["worker"].Environment
		// The endpoint comes from the URI or from AWS_ENDPOINT_URL_S3, read
		// by the SDK, which also turns on path-style addressing.
		for k, v := range env {
			if strings.HasPrefix(k, "AWS_") {
				t.Setenv(k, v)
			}
		}
		t.Setenv("WEIR_S3_ENDPOINT", "")
		opts, err := checkpoint.S3OptionsFromURI(run.Checkpoints)
		if err != nil {
			t.Fatal(err)
		}
		endpoint := opts.Endpoint
		if endpoint == "" {
			endpoint = env["AWS_ENDPOINT_URL_S3"]
		}
		if !opts.PathStyle {
			t.Error("MinIO needs path-style addressing, and the worker's settings do not give it")
		}
		if env["AWS_REGION"] == "" && opts.Region == "" {
			t.Error("no region: set AWS_REGION or region= in WEIR_CHECKPOINTS")
		}
		minio := f.Services["minio"]
		user, pass := minio.Environment["MINIO_ROOT_USER"], minio.Environment["MINIO_ROOT_PASSWORD"]
		if user == "" || pass == "" {
			t.Fatal("MINIO_ROOT_USER / MINIO_ROOT_PASSWORD not set")
		}
		if env["AWS_ACCESS_KEY_ID"] != user || env["AWS_SECRET_ACCESS_KEY"] != pass {
			t.Error("the worker's AWS credentials are not MinIO's root user")
		}
		api := "minio:" + minioPort(t, minio)
		if u, err := url.Parse(endpoint); err != nil || u.Host != api {
			t.Errorf("worker's S3 endpoint %q, want http://%s (the minio service)", endpoint, api)
		}
		mc := minioInit(t, f.Services["minio-init"])
		if mc.url.Host != api || mc.user != user || mc.pass != pass {
			t.Errorf("minio-init's alias %s (user %s) is not the minio service at %s with its root user", mc.url, mc.user, api)
		}
		if mc.bucket != opts.Bucket {
			t.Errorf("minio-init creates bucket %q, the workers checkpoint to %q", mc.bucket, opts.Bucket)
		}
	})

	t.Run("worker", func(t *testing.T) {
		svc := f.Services["worker"]
		// The replicas share the tasks through the group: a static task
		// list would make every replica run every task.
		if len(run.Tasks) > 0 || run.Epoch != 0 {
			t.Errorf("worker sets tasks %v / epoch %d: the replicas must get their tasks from the group", run.Tasks, run.Epoch)
		}
		if svc.Replicas() < 2 {
			t.Errorf("worker has %d replicas, want 2", svc.Replicas())
		}
		// The status page listens on all interfaces inside the container,
		// on the port the service publishes (any host port, so --scale
		// works) and the healthcheck probes.
		host, port, err := net.SplitHostPort(run.HTTPAddr)
		if err != nil || host != "0.0.0.0" {
			t.Errorf("WEIR_HTTP_ADDR %q: want 0.0.0.0:PORT, reachable from outside the container", run.HTTPAddr)
		}
		published := false
		for _, p := range svc.Ports {
			parts := strings.Split(p, ":")
			if parts[len(parts)-1] == port {
				published = true
				if len(parts) == 3 && parts[1] != "" || len(parts) == 2 {
					t.Errorf("port %q publishes a fixed host port: --scale worker=3 would collide", p)
				}
			}
		}
		if !published {
			t.Errorf("container port %s is not published (ports %v)", port, svc.Ports)
		}
		if svc.Healthcheck == nil {
			t.Fatal("worker has no healthcheck")
		}
		argv, err := svc.Healthcheck.Exec()
		if err != nil {
			t.Fatal(err)
		}
		img, _ := compose.StageOf(d.stages, "processor")
		if len(img.Entrypoint) == 0 || argv[0] != img.Entrypoint[0] {
			t.Errorf("healthcheck runs %s, the image's binary is %v", argv[0], img.Entrypoint)
		}
		if len(argv) != 3 || argv[1] != "probe" {
			t.Fatalf("healthcheck %q: want processor probe URL", argv)
		}
		u, err := url.Parse(argv[2])
		if err != nil || u.Port() != port || u.Path != "/readyz" || (u.Hostname() != "127.0.0.1" && u.Hostname() != "localhost") {
			t.Errorf("healthcheck probes %s, want http://127.0.0.1:%s/readyz", argv[2], port)
		}
	})
}

// pinned says why image is not pinned to a tag (or digest).
func pinned(image string) error {
	if image == "" {
		return errors.New("no image")
	}
	if strings.Contains(image, "@sha256:") {
		return nil
	}
	last := image[strings.LastIndex(image, "/")+1:]
	_, tag, ok := strings.Cut(last, ":")
	switch {
	case !ok || tag == "":
		return fmt.Errorf("image %q has no tag", image)
	case tag == "latest":
		return fmt.Errorf("image %q is not pinned (latest)", image)
	}
	return nil
}

func advertised(listeners, addr string) bool {
	for _, l := range strings.Split(listeners, ",") {
		if _, hostport, ok := strings.Cut(l, "://"); ok && hostport == addr {
			return true
		}
	}
	return false
}

// kafkaInitTopics reads kafka-init's script: kafka-topics.sh --create calls
// joined by &&, and returns each topic's partitions and the bootstrap
// server they use.
func kafkaInitTopics(t *testing.T, svc compose.Service) (map[string]int, string) {
	t.Helper()
	script, ok := svc.Script()
	if !ok {
		t.Fatalf("kafka-init is not an sh -c script: entrypoint %q command %q", svc.Entrypoint, svc.Command)
	}
	topics := map[string]int{}
	bootstrap := ""
	for _, call := range strings.Split(script, "&&") {
		args := strings.Fields(call)
		if len(args) == 0 || filepath.Base(args[0]) != "kafka-topics.sh" {
			t.Fatalf("kafka-init: %q is not a kafka-topics.sh call (the script must be such calls joined by &&)", strings.TrimSpace(call))
		}
		flags := map[string]string{}
		for i := 1; i < len(args); i++ {
			k := args[i]
			if !strings.HasPrefix(k, "--") {
				t.Fatalf("kafka-init: unexpected %q in %q", k, call)
			}
			if i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
				flags[k] = args[i+1]
				i++
			} else {
				flags[k] = ""
			}
		}
		if _, ok := flags["--create"]; !ok {
			t.Fatalf("kafka-init: %q does not --create", call)
		}
		if _, ok := flags["--if-not-exists"]; !ok {
			t.Errorf("kafka-init: %q fails when the topic exists (a second docker compose up)", call)
		}
		n, err := strconv.Atoi(flags["--partitions"])
		if err != nil || n < 1 {
			t.Fatalf("kafka-init: %q: --partitions %q", call, flags["--partitions"])
		}
		topics[flags["--topic"]] = n
		if bootstrap != "" && flags["--bootstrap-server"] != bootstrap {
			t.Errorf("kafka-init uses two bootstrap servers")
		}
		bootstrap = flags["--bootstrap-server"]
	}
	return topics, bootstrap
}

type mcAlias struct {
	url        *url.URL
	user, pass string
	bucket     string
}

// minioInit reads minio-init's script: `mc alias set A URL USER PASS && mc
// mb [--ignore-existing] A/BUCKET`.
func minioInit(t *testing.T, svc compose.Service) mcAlias {
	t.Helper()
	script, ok := svc.Script()
	if !ok {
		t.Fatalf("minio-init is not an sh -c script: entrypoint %q command %q", svc.Entrypoint, svc.Command)
	}
	calls := strings.Split(script, "&&")
	if len(calls) != 2 {
		t.Fatalf("minio-init: %q, want mc alias set ... && mc mb ...", script)
	}
	set, mb := strings.Fields(calls[0]), strings.Fields(calls[1])
	if len(set) != 7 || set[0] != "mc" || set[1] != "alias" || set[2] != "set" {
		t.Fatalf("minio-init: %q, want mc alias set ALIAS URL USER PASSWORD", calls[0])
	}
	u, err := url.Parse(set[4])
	if err != nil {
		t.Fatal(err)
	}
	if len(mb) < 3 || mb[0] != "mc" || mb[1] != "mb" {
		t.Fatalf("minio-init: %q, want mc mb ALIAS/BUCKET", calls[1])
	}
	if !slices.Contains(mb, "--ignore-existing") {
		t.Errorf("minio-init: %q fails when the bucket exists (a second docker compose up)", calls[1])
	}
	alias, bucket, _ := strings.Cut(mb[len(mb)-1], "/")
	if alias != set[3] {
		t.Errorf("minio-init makes the bucket on alias %s, sets alias %s", alias, set[3])
	}
	return mcAlias{url: u, user: set[5], pass: set[6], bucket: bucket}
}

// minioPort is the port of MinIO's S3 API in its container (--address,
// default 9000).
func minioPort(t *testing.T, svc compose.Service) string {
	for i, a := range svc.Command {
		if a == "--address" && i+1 < len(svc.Command) {
			_, port, err := net.SplitHostPort(svc.Command[i+1])
			if err != nil {
				t.Fatal(err)
			}
			return port
		}
	}
	return "9000"
}

func mapKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// TestDockerfile builds what the Dockerfile builds, the way it builds it:
// the RUN lines of the stages the processor and job images come from run
// here with sh (their /out directory moved to a temporary one), and the
// binaries must be static (the final images are distroless static, with no
// libc) and answer like a worker. It also checks the images run as nonroot
// with the default command run.
func TestDockerfile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two binaries")
	}
	stages, err := compose.ParseDockerfile(dockerfilePath)
	if err != nil {
		t.Fatal(err)
	}
	if last := stages[len(stages)-1]; last.Name != "processor" {
		t.Errorf("the default target (the last stage) is %q, want processor", last.Name)
	}
	out := t.TempDir()
	root, _ := filepath.Abs("../..")
	built := map[string]bool{}
	var build func(name string, env []string)
	build = func(name string, env []string) {
		s, ok := compose.StageOf(stages, name)
		if !ok {
			t.Fatalf("no stage %s", name)
		}
		if _, ok := compose.StageOf(stages, s.From); ok && s.From != name {
			build(s.From, env)
		}
		if built[name] {
			return
		}
		built[name] = true
		// A build argument reaches the RUN lines of a stage that declares
		// it (ARG), and no other.
		var args []string
		for _, kv := range env {
			k, _, _ := strings.Cut(kv, "=")
			for _, a := range s.Args {
				if name, _, _ := strings.Cut(a, "="); name == k {
					args = append(args, kv)
				}
			}
		}
		for _, run := range s.Runs {
			line := strings.ReplaceAll(run, "/out/", out+"/")
			cmd := exec.Command("sh", "-c", line)
			cmd.Dir = root
			cmd.Env = append(os.Environ(), args...)
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("stage %s: RUN %s: %v\n%s", name, run, err, b)
			}
		}
	}
	for _, img := range []struct {
		stage, bin string
		env        []string
	}{
		{"processor", "processor", nil},
		{"job", "job", []string{"JOB_MAIN=./examples/balance/cmd/balance"}},
	} {
		t.Run(img.stage, func(t *testing.T) {
			s, ok := compose.StageOf(stages, img.stage)
			if !ok {
				t.Fatalf("no stage %s", img.stage)
			}
			if !strings.Contains(s.From, "distroless/static") {
				t.Errorf("stage %s is based on %s, want a distroless static image", img.stage, s.From)
			}
			if s.User == "" || s.User == "root" || strings.HasPrefix(s.User, "0") {
				t.Errorf("stage %s runs as %q, want a non-root user", img.stage, s.User)
			}
			if want := []string{"/usr/local/bin/" + img.bin}; !slices.Equal(s.Entrypoint, want) || !slices.Equal(s.Cmd, []string{"run"}) {
				t.Errorf("stage %s: ENTRYPOINT %q CMD %q, want %q and [run]", img.stage, s.Entrypoint, s.Cmd, want)
			}
			// The binary comes from a build stage: build that.
			var from string
			for _, c := range s.Copies {
				for _, a := range c {
					if f, ok := strings.CutPrefix(a, "--from="); ok && slices.Contains(c, "/usr/local/bin/"+img.bin) {
						from = f
					}
				}
			}
			if from == "" {
				t.Fatalf("stage %s copies no /usr/local/bin/%s from a build stage", img.stage, img.bin)
			}
			build(from, img.env)
			bin := filepath.Join(out, img.bin)
			if err := static(bin); err != nil {
				t.Error(err)
			}
			// The image's state directory: the Dockerfile makes it, owned
			// by the image's user (WORKDIR alone would make it root's).
			dir := s.Env["WEIR_STATE_DIR"]
			if dir == "" || s.Workdir != dir {
				t.Errorf("stage %s: WEIR_STATE_DIR %q, WORKDIR %q: want the state in the workdir", img.stage, dir, s.Workdir)
			}
			owned := false
			for _, c := range s.Copies {
				if len(c) >= 2 && c[len(c)-1] == dir && slices.Contains(c, "--chown="+s.User) {
					owned = true
					if src := c[len(c)-2]; !strings.HasPrefix(src, "/out/") {
						t.Errorf("stage %s copies its state directory from %s, not a directory a build stage made", img.stage, src)
					} else if _, err := os.Stat(filepath.Join(out, strings.TrimPrefix(src, "/out/"))); err != nil {
						t.Errorf("stage %s: the state directory it copies was not built: %v", img.stage, err)
					}
				}
			}
			if !owned {
				t.Errorf("stage %s: no COPY --chown=%s into %s: the state directory would be root's", img.stage, s.User, dir)
			}
			// The default command with -h lists the worker's flags, and
			// probe is there for the healthcheck.
			ctx := context.Background()
			var help bytes.Buffer
			cmd := exec.CommandContext(ctx, bin, append(s.Cmd, "-h")...)
			cmd.Stdout, cmd.Stderr = &help, &help
			if err := cmd.Run(); err != nil || !strings.Contains(help.String(), "-session-timeout") {
				t.Errorf("%s %v -h: %v\n%s", img.bin, s.Cmd, err, help.String())
			}
			cmd = exec.CommandContext(ctx, bin, "probe")
			cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
			var exit *exec.ExitError
			if err := cmd.Run(); !errors.As(err, &exit) || exit.ExitCode() != 2 {
				t.Errorf("%s probe without a URL: %v, want exit 2", img.bin, err)
			}
		})
	}
	// The job target refuses to build without its main.
	s, _ := compose.StageOf(stages, "build-job")
	for _, run := range s.Runs {
		if strings.Contains(run, "JOB_MAIN") && !strings.Contains(run, "go build") {
			cmd := exec.Command("sh", "-c", run)
			cmd.Env = append(os.Environ(), "JOB_MAIN=")
			if b, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(b), "JOB_MAIN") {
				t.Errorf("build-job without JOB_MAIN: %v %s, want a failure naming JOB_MAIN", err, b)
			}
		}
	}
}

// static fails unless bin is an ELF executable with no interpreter and no
// shared libraries.
func static(bin string) error {
	f, err := elf.Open(bin)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s has an interpreter: not static", bin)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		return fmt.Errorf("%s needs %v: not static", bin, libs)
	}
	return nil
}
