package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weirstream/weir/internal/compose"
)

// TestComposeSmoke runs docker-compose.yml's services without Docker: each
// service's own command and environment, as a process on this host, in the
// order its depends_on conditions give, against a real broker (KAFKA_BROKERS)
// standing in for the kafka service and an S3 server over HTTP standing in
// for minio. No container can start here; this is what shows the file's
// settings work together. What is replaced, and nothing else:
//
//   - host names: kafka:PORT becomes the broker's address, minio:PORT the S3
//     server's; a worker's 0.0.0.0:9464 becomes a free port on 127.0.0.1
//     (the replicas share this host), and its healthcheck probes that port;
//   - image paths: /opt/kafka/bin/X.sh runs the same Kafka tool through
//     scripts/kafka tool; /usr/local/bin/processor is the processor built
//     from this repo; the image's state directory is one per replica;
//   - mc, MinIO's client, is a stand-in implementing the two commands the
//     file uses (alias set, mb) and `ready` with the S3 SDK (mcStandIn).
//
// While the generator writes, a third worker joins (docker compose up
// --scale worker=3) and one is killed with SIGKILL (docker compose kill -s
// KILL); verify must then print a clean verdict, every task must run on
// exactly one live worker, and every worker must drain on SIGTERM within
// the service's stop_grace_period.
//
// make compose-smoke runs it (WEIR_COMPOSE_SMOKE=1) on a fresh broker.
func TestComposeSmoke(t *testing.T) {
	if os.Getenv("WEIR_COMPOSE_SMOKE") != "1" {
		t.Skip("run by make compose-smoke (WEIR_COMPOSE_SMOKE=1 with KAFKA_BROKERS of a fresh real broker)")
	}
	brokers := os.Getenv("KAFKA_BROKERS")
	if brokers == "" {
		t.Fatal("WEIR_COMPOSE_SMOKE=1 needs KAFKA_BROKERS: the broker standing in for the kafka service")
	}
	broker := strings.Split(brokers, ",")[0]
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	f, err := compose.Load(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	stages, err := compose.ParseDockerfile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	order, err := f.Order()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	// The compose file's topics must not exist yet: a worker with fresh
	// checkpoint storage would read an old run's input again.
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if topics, err := adm.ListTopics(ctx); err != nil {
		t.Fatal(err)
	} else if topics.Has("weir-input") || topics.Has("weir-output") {
		t.Fatalf("the broker at %s already has the compose file's topics: the smoke run needs a fresh broker (make compose-smoke starts one)", broker)
	}

	// The S3 server standing in for minio, with no bucket: minio-init
	// must create the one the workers use.
	s3srv := httptest.NewServer(gofakes3.New(s3mem.New()).Server())
	defer s3srv.Close()
	s3url, _ := url.Parse(s3srv.URL)
	minio := f.Services["minio"].Environment

	s := &smoke{
		t: t, ctx: ctx, f: f, root: root, ps: newProcs(t),
		bin:     processorBinary(t),
		shims:   t.TempDir(),
		done:    map[string]bool{},
		workers: map[*proc]string{},
		rewrites: []rewrite{
			{regexp.MustCompile(`\bkafka:[0-9]+\b`), broker},
			{regexp.MustCompile(`\bminio:[0-9]+\b`), s3url.Host},
		},
		image: imageStage(t, stages, "processor"),
	}
	s.writeShims(t, s3srv.URL, minio["MINIO_ROOT_USER"], minio["MINIO_ROOT_PASSWORD"])

	s.during = func() {
		// docker compose up --scale worker=3, while the generator writes.
		third := s.startWorker(len(s.replicas["worker"]) + 1)
		s.waitHealthy("worker", third)
		// docker kill -s KILL on a replica that runs a task with a
		// completed checkpoint, once the three share the tasks.
		td, err := adm.ListTopics(ctx, "weir-input")
		if err != nil {
			t.Fatal(err)
		}
		waitEachTaskOnce(ctx, t, s.replicas["worker"], s.workers, len(td["weir-input"].Partitions), 90*time.Second)
		victim := s.checkpointedWorker()
		t.Logf("kill -9 %s (pid %d)", victim.name, victim.Pid())
		victim.Kill9()
	}

	// Compose starts every service whose dependencies are met at once; a
	// service that waits for a one-shot still running (verify for the
	// generator) starts last here, after the others.
	var later []string
	for _, name := range order {
		if s.waitsForRunning(name) {
			later = append(later, name)
			continue
		}
		s.start(name)
	}
	for _, name := range later {
		s.start(name)
	}

	if s.during != nil {
		t.Fatal("the generator was done before the workers started: no worker joined or was killed while it wrote")
	}
	// verify is a one-shot: its exit status is the verdict.
	v := s.replicas["verify"][0]
	err = v.ExitErr(5 * time.Minute)
	verdict := ""
	for _, l := range v.Lines() {
		if strings.HasPrefix(l, "records in ") {
			verdict = l
		}
	}
	fmt.Printf("compose smoke verdict: %s\n", verdict)
	if err != nil || !strings.Contains(verdict, "duplicates 0, missing 0") {
		v.dump(40)
		t.Fatalf("verify: %v, verdict %q", err, verdict)
	}
	t.Logf("verify: %s", verdict)

	// The group settles with every task on exactly one live worker, each
	// worker's status page answering.
	td, err := adm.ListTopics(ctx, "weir-input")
	if err != nil {
		t.Fatal(err)
	}
	partitions := len(td["weir-input"].Partitions)
	if partitions == 0 {
		t.Fatal("kafka-init did not create weir-input")
	}
	var live []*proc
	for _, w := range s.replicas["worker"] {
		if !w.Exited() {
			live = append(live, w)
		}
	}
	assignment := waitEachTaskOnce(ctx, t, live, s.workers, partitions, 90*time.Second)
	t.Logf("tasks on the live workers: %v", assignment)
	// The killed worker's tasks moved through their checkpoints in S3.
	restores := checkpointRestores(live)
	t.Logf("%d task restores from a checkpoint", restores)
	if restores == 0 {
		t.Error("no task was restored from a checkpoint: the kill moved nothing through S3")
	}

	// The checkpoints are in the bucket minio-init created.
	c := s3.New(s3.Options{
		BaseEndpoint: aws.String(s3srv.URL), UsePathStyle: true, Region: "us-east-1",
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "x", SecretAccessKey: "x"}, nil
		}),
	})
	buckets, err := c.ListBuckets(ctx, &s3.ListBucketsInput{})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range buckets.Buckets {
		objs, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: b.Name})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("bucket %s: %d objects", aws.ToString(b.Name), len(objs.Contents))
		if len(objs.Contents) == 0 {
			t.Errorf("bucket %s holds no checkpoint", aws.ToString(b.Name))
		}
	}
	if len(buckets.Buckets) != 1 {
		t.Errorf("buckets %v, want the one minio-init creates", buckets.Buckets)
	}

	// docker compose stop: SIGTERM, then SIGKILL after stop_grace_period.
	grace := 10 * time.Second
	if d, err := time.ParseDuration(f.Services["worker"].StopGracePeriod); err == nil {
		grace = d
	}
	for _, w := range live {
		if err, graceful := w.Terminate(grace); err != nil || !graceful {
			t.Errorf("%s on SIGTERM: %v (within %v: %v)", w.name, err, grace, graceful)
		}
	}
}

type rewrite struct {
	re *regexp.Regexp
	to string
}

// smoke runs the services of a compose file as processes.
type smoke struct {
	t        *testing.T
	ctx      context.Context
	f        *compose.File
	root     string
	ps       *procs
	bin      string // the processor, for /usr/local/bin/processor
	shims    string // kafka-topics.sh and friends, and mc
	rewrites []rewrite
	image    compose.Stage // the processor image's final stage

	done     map[string]bool    // services started (or, for scripts, run)
	replicas map[string][]*proc // processes of the processor services
	workers  map[*proc]string   // each worker replica's status address
	during   func()             // runs once, before the first wait for a running one-shot
	current  string             // the service being started
}

func imageStage(t *testing.T, stages []compose.Stage, name string) compose.Stage {
	s, ok := compose.StageOf(stages, name)
	if !ok {
		t.Fatalf("Dockerfile has no stage %s", name)
	}
	return s
}

// host rewrites the service host names and image paths in v.
func (s *smoke) host(v string) string {
	for _, r := range s.rewrites {
		v = r.re.ReplaceAllString(v, r.to)
	}
	v = strings.ReplaceAll(v, "/opt/kafka/bin/", s.shims+"/")
	if len(s.image.Entrypoint) > 0 {
		v = strings.ReplaceAll(v, s.image.Entrypoint[0], s.bin)
	}
	return v
}

// writeShims puts the Kafka distribution's scripts (run by scripts/kafka
// tool, on the broker's jars) and the mc stand-in into s.shims. minio's own
// alias "local", which its image configures, names the S3 server.
func (s *smoke) writeShims(t *testing.T, s3URL, user, pass string) {
	// The tools find the broker's version and jars where scripts/kafka
	// put them, whatever HOME the service runs with.
	kafkaDir := os.Getenv("WEIR_KAFKA_DIR")
	cache := os.Getenv("WEIR_CACHE_DIR")
	if cache == "" {
		if xdg := os.Getenv("XDG_CACHE_HOME"); xdg != "" {
			cache = filepath.Join(xdg, "weir")
		} else if home, err := os.UserHomeDir(); err == nil {
			cache = filepath.Join(home, ".cache", "weir")
		}
	}
	for _, script := range []string{"kafka-topics.sh", "kafka-broker-api-versions.sh"} {
		body := fmt.Sprintf("#!/bin/sh\nWEIR_KAFKA_DIR=%q WEIR_CACHE_DIR=%q exec %q tool %s \"$@\"\n", kafkaDir, cache, filepath.Join(s.root, "scripts", "kafka"), script)
		if err := os.WriteFile(filepath.Join(s.shims, script), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	mcDir := t.TempDir()
	body := fmt.Sprintf("#!/bin/sh\n%s=%q exec %q \"$@\"\n", mcStandInEnv, mcDir, self)
	if err := os.WriteFile(filepath.Join(s.shims, "mc"), []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	if code := mcStandIn(mcDir, []string{"alias", "set", "local", s3URL, user, pass}, io.Discard, os.Stderr); code != 0 {
		t.Fatal("mc alias set local failed")
	}
}

// start starts service name after waiting for its dependencies.
func (s *smoke) start(name string) {
	t := s.t
	svc := s.f.Services[name]
	deps := slices.Sorted(func(yield func(string) bool) {
		for d := range svc.DependsOn {
			if !yield(d) {
				return
			}
		}
	})
	s.current = name
	for _, dep := range deps {
		s.waitFor(dep, svc.DependsOn[dep])
	}
	switch script, isScript := svc.Script(); {
	case name == "kafka" || name == "minio":
		t.Logf("%s: stands in: %s", name, map[string]string{"kafka": "the broker of KAFKA_BROKERS", "minio": "an in-process S3 server over HTTP"}[name])
	case isScript:
		// Run twice: a second docker compose up runs it again.
		for range 2 {
			s.runScript(name, script)
		}
	case svc.Build != nil:
		if s.replicas == nil {
			s.replicas = map[string][]*proc{}
		}
		for i := range svc.Replicas() {
			if name == "worker" {
				s.startWorker(i + 1)
			} else {
				s.replicas[name] = append(s.replicas[name], s.startProcessor(name, i+1, ""))
			}
		}
	default:
		t.Fatalf("service %s: neither a stand-in, an sh -c script nor the processor image", name)
	}
	s.done[name] = true
}

// checkpointedWorker waits for a worker whose status page shows a running
// task with a completed checkpoint, and returns it.
func (s *smoke) checkpointedWorker() *proc {
	t := s.t
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		for _, w := range s.replicas["worker"] {
			if w.Exited() {
				continue
			}
			var st struct {
				Tasks []struct {
					State       string            `json:"state"`
					Checkpoints []json.RawMessage `json:"checkpoints"`
				} `json:"tasks"`
			}
			req, _ := http.NewRequestWithContext(s.ctx, http.MethodGet, "http://"+s.workers[w]+"/status.json", nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				continue
			}
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			if err != nil {
				continue
			}
			for _, task := range st.Tasks {
				if task.State == "running" && len(task.Checkpoints) > 0 {
					return w
				}
			}
		}
		poll(s.ctx, t, 200*time.Millisecond)
	}
	t.Fatal("no worker ran a task with a completed checkpoint within 60s")
	return nil
}

// waitsForRunning says whether service name waits for the completion of a
// one-shot that is still running, or for a service not started yet.
func (s *smoke) waitsForRunning(name string) bool {
	for dep, cond := range s.f.Services[name].DependsOn {
		if !s.done[dep] {
			return true
		}
		if cond == "service_completed_successfully" {
			for _, p := range s.replicas[dep] {
				if !p.Exited() {
					return true
				}
			}
		}
	}
	return false
}

// env is a processor container's environment: the image's, then the
// service's, with the state directory made one per replica.
func (s *smoke) env(svc compose.Service, stateDir string) []string {
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + stateDir}
	for k, v := range s.image.Env {
		if v == s.image.Workdir {
			v = stateDir
		}
		env = append(env, k+"="+v)
	}
	for k, v := range svc.Environment {
		env = append(env, k+"="+s.host(v))
	}
	return env
}

func (s *smoke) startProcessor(name string, i int, httpAddr string) *proc {
	svc := s.f.Services[name]
	stateDir := s.t.TempDir()
	env := s.env(svc, stateDir)
	if httpAddr != "" {
		env = append(env, "WEIR_HTTP_ADDR="+httpAddr) // later entries win
	}
	args := make([]string, len(svc.Command))
	for j, a := range svc.Command {
		args[j] = s.host(a)
	}
	return s.ps.startCmd(fmt.Sprintf("%s-%d", name, i), env, s.bin, args...)
}

// startWorker starts worker replica i on a free local port.
func (s *smoke) startWorker(i int) *proc {
	p := s.startProcessor("worker", i, "127.0.0.1:0")
	s.replicas["worker"] = append(s.replicas["worker"], p)
	s.workers[p] = httpAddr(s.ctx, s.t, p)
	return p
}

func (s *smoke) runScript(name, script string) {
	t := s.t
	ctx, cancel := context.WithTimeout(s.ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", s.host(script))
	cmd.Env = []string{"PATH=" + s.shims + ":" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	if jh := os.Getenv("JAVA_HOME"); jh != "" {
		cmd.Env = append(cmd.Env, "JAVA_HOME="+jh)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: sh -c %q: %v\n%s", name, s.host(script), err, out)
	}
	t.Logf("%s: %s", name, strings.TrimSpace(string(out)))
}

// waitFor waits for service dep to meet condition cond.
func (s *smoke) waitFor(dep, cond string) {
	t := s.t
	if !s.done[dep] {
		t.Fatalf("%s is not started yet", dep) // Order puts dependencies first
	}
	switch cond {
	case "service_healthy":
		if ps := s.replicas[dep]; len(ps) > 0 {
			// As compose: a container of the service that exited fails
			// the dependency.
			for _, p := range ps {
				if p.Exited() {
					t.Fatalf("%s waits for %s to be healthy, and %s exited", s.current, dep, p.name)
				}
				s.waitHealthy(dep, p)
			}
			return
		}
		s.waitHealthy(dep, nil)
	case "service_completed_successfully":
		for _, p := range s.replicas[dep] {
			if !p.Exited() && s.during != nil {
				during := s.during
				s.during = nil
				during()
			}
			if err := p.ExitErr(5 * time.Minute); err != nil {
				p.dump(40)
				t.Fatalf("%s: %v", p.name, err)
			}
			t.Logf("%s completed: %s", p.name, lastLine(p))
		}
	default:
		t.Fatalf("condition %s is not one this test knows", cond)
	}
}

// waitHealthy runs dep's healthcheck (for process p, if a replica) until
// it passes, at most retries times, a second apart.
func (s *smoke) waitHealthy(dep string, p *proc) {
	t := s.t
	hc := s.f.Services[dep].Healthcheck
	argv, err := hc.Exec()
	if err != nil {
		t.Fatalf("%s: %v", dep, err)
	}
	cmdline := make([]string, len(argv))
	for i, a := range argv {
		a = s.host(a)
		if p != nil {
			// The probe's port inside the container is this replica's.
			a = regexp.MustCompile(`(127\.0\.0\.1|localhost):[0-9]+`).ReplaceAllString(a, s.workers[p])
		}
		cmdline[i] = a
	}
	retries := max(hc.Retries, 3)
	var out []byte
	for range retries {
		ctx, cancel := context.WithTimeout(s.ctx, 60*time.Second)
		cmd := exec.CommandContext(ctx, s.lookPath(cmdline[0]), cmdline[1:]...)
		cmd.Env = []string{"PATH=" + s.shims + ":" + os.Getenv("PATH"), "HOME=" + os.TempDir()}
		if jh := os.Getenv("JAVA_HOME"); jh != "" {
			cmd.Env = append(cmd.Env, "JAVA_HOME="+jh)
		}
		out, err = cmd.CombinedOutput()
		cancel()
		if err == nil {
			who := dep
			if p != nil {
				who = p.name
			}
			t.Logf("%s healthy: %s", who, strings.Join(cmdline, " "))
			return
		}
		if p != nil && p.Exited() {
			p.dump(40)
			t.Fatalf("%s exited before it was healthy", p.name)
		}
		poll(s.ctx, t, time.Second)
	}
	t.Fatalf("%s not healthy after %d tries of %q: %v\n%s", dep, retries, cmdline, err, out)
}

// lookPath finds a command as the service's PATH (the shims first) would.
func (s *smoke) lookPath(name string) string {
	if strings.Contains(name, "/") {
		return name
	}
	if p := filepath.Join(s.shims, name); fileExists(p) {
		return p
	}
	return name
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func lastLine(p *proc) string {
	ls := p.Lines()
	if len(ls) == 0 {
		return ""
	}
	return ls[len(ls)-1]
}

// mcStandInEnv names the directory of the mc stand-in's aliases; set, the
// test binary runs as mc (TestMain).
const mcStandInEnv = "WEIR_TEST_MC_CONFIG"

// mcStandIn does what MinIO's client does for the commands the compose
// file runs, with the S3 SDK:
//
//	mc alias set ALIAS URL ACCESS-KEY SECRET-KEY
//	mc mb [--ignore-existing|-p] ALIAS/BUCKET
//	mc ready ALIAS
//
// and refuses any other command.
func mcStandIn(dir string, args []string, stdout, stderr io.Writer) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "mc (test stand-in): "+format+"\n", a...)
		return 1
	}
	path := filepath.Join(dir, "aliases.json")
	aliases := map[string][3]string{}
	if b, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(b, &aliases); err != nil {
			return fail("%s: %v", path, err)
		}
	}
	client := func(alias string) (*s3.Client, error) {
		a, ok := aliases[alias]
		if !ok {
			return nil, fmt.Errorf("no alias %q (mc alias set first)", alias)
		}
		return s3.New(s3.Options{
			BaseEndpoint: aws.String(a[0]), UsePathStyle: true, Region: "us-east-1",
			Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
				return aws.Credentials{AccessKeyID: a[1], SecretAccessKey: a[2]}, nil
			}),
		}), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch {
	case len(args) == 6 && args[0] == "alias" && args[1] == "set":
		if _, err := url.Parse(args[3]); err != nil {
			return fail("alias set: %v", err)
		}
		aliases[args[2]] = [3]string{args[3], args[4], args[5]}
		b, _ := json.Marshal(aliases)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return fail("%v", err)
		}
		fmt.Fprintf(stdout, "Added `%s` successfully.\n", args[2])
		return 0
	case len(args) >= 2 && args[0] == "mb":
		ignore := slices.Contains(args[1:len(args)-1], "--ignore-existing") || slices.Contains(args[1:len(args)-1], "-p")
		alias, bucket, ok := strings.Cut(args[len(args)-1], "/")
		if !ok || bucket == "" {
			return fail("mb %s: want ALIAS/BUCKET", args[len(args)-1])
		}
		c, err := client(alias)
		if err != nil {
			return fail("mb: %v", err)
		}
		_, err = c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)})
		var owned *types.BucketAlreadyOwnedByYou
		var exists *types.BucketAlreadyExists
		switch {
		case err == nil:
			fmt.Fprintf(stdout, "Bucket created successfully `%s/%s`.\n", alias, bucket)
		case (errors.As(err, &owned) || errors.As(err, &exists)) && ignore:
			fmt.Fprintf(stdout, "Bucket `%s/%s` already exists.\n", alias, bucket)
		default:
			return fail("mb %s/%s: %v", alias, bucket, err)
		}
		return 0
	case len(args) == 2 && args[0] == "ready":
		c, err := client(args[1])
		if err != nil {
			return fail("ready: %v", err)
		}
		if _, err := c.ListBuckets(ctx, &s3.ListBucketsInput{}); err != nil {
			return fail("ready %s: %v", args[1], err)
		}
		fmt.Fprintf(stdout, "The cluster '%s' is ready\n", args[1])
		return 0
	}
	return fail("unsupported command %q", args)
}
