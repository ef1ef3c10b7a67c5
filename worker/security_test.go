package worker

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.yaml.in/yaml/v3"

	"github.com/weirstream/weir/examples/count"
	"github.com/weirstream/weir/internal/cli"
	"github.com/weirstream/weir/internal/testcluster"
)

// certs writes a CA, a broker and a client certificate into a temporary
// directory and returns it (testcluster.WriteCertificates names the files).
func certs(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := testcluster.WriteCertificates(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

func writeSecret(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSecuritySettings: each setting comes from a flag, a WEIR_ variable
// or the settings file, as the others do.
func TestSecuritySettings(t *testing.T) {
	dir := certs(t)
	ca, cert, key := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	pwFile := writeSecret(t, "from-a-file\n")
	want := Security{
		Protocol: "SASL_SSL", TLSCAFile: ca, TLSCertFile: cert, TLSKeyFile: key, TLSServerName: "localhost",
		SASLMechanism: "SCRAM-SHA-512", SASLUsername: "alice",
	}
	for _, tc := range []struct {
		name string
		args []string
		env  []string
		file string
		pass Secret
	}{
		{name: "flags", args: []string{
			"--security-protocol", "SASL_SSL", "--tls-ca-file", ca, "--tls-cert-file", cert, "--tls-key-file", key,
			"--tls-server-name", "localhost", "--sasl-mechanism", "SCRAM-SHA-512", "--sasl-username", "alice",
			"--sasl-password", "s3cret-flag",
		}, pass: "s3cret-flag"},
		{name: "environment", env: []string{
			"WEIR_SECURITY_PROTOCOL", "SASL_SSL", "WEIR_TLS_CA_FILE", ca, "WEIR_TLS_CERT_FILE", cert, "WEIR_TLS_KEY_FILE", key,
			"WEIR_TLS_SERVER_NAME", "localhost", "WEIR_SASL_MECHANISM", "SCRAM-SHA-512", "WEIR_SASL_USERNAME", "alice",
			"WEIR_SASL_PASSWORD", "s3cret-env",
		}, pass: "s3cret-env"},
		{name: "file", file: fmt.Sprintf(`
security-protocol: SASL_SSL
tls-ca-file: %s
tls-cert-file: %s
tls-key-file: %s
tls-server-name: localhost
sasl-mechanism: SCRAM-SHA-512
sasl-username: alice
sasl-password-file: %s
`, ca, cert, key, pwFile)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--input", "in", "--output", "out"}, tc.args...)
			if tc.file != "" {
				args = append(args, "--config", writeFile(t, tc.file))
			}
			c, err := Parse(args, env(tc.env...), &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			w := want
			w.SASLPassword = tc.pass
			if tc.file != "" {
				w.SASLPasswordFile = pwFile
			}
			if c.Security != w {
				t.Errorf("got %#v\nwant %#v", c.Security, w)
			}
			opts, err := c.Security.ClientOpts()
			if err != nil || len(opts) != 2 {
				t.Errorf("ClientOpts: %d options, %v; want TLS and SASL", len(opts), err)
			}
		})
	}
	// The file's final line break is not part of the password.
	s := Security{SASLPasswordFile: pwFile}
	if p, err := s.password(); p != "from-a-file" || err != nil {
		t.Errorf("password from %q: %q, %v", "from-a-file\n", p, err)
	}
	// PLAINTEXT, the default, adds nothing.
	if opts, err := (&Security{}).ClientOpts(); len(opts) != 0 || err != nil {
		t.Errorf("PLAINTEXT: %d options, %v", len(opts), err)
	}
}

// TestSecurityValidateNamesTheSetting: a bad combination fails Validate,
// a file that cannot be used fails ClientOpts (at start: Validate reads no
// file), each naming the setting, and no error shows the password.
func TestSecurityValidateNamesTheSetting(t *testing.T) {
	dir := certs(t)
	const pw = "pw-never-shown-4711"
	ca := filepath.Join(dir, "ca.pem")
	sasl := func(s *Security) {
		s.Protocol, s.SASLMechanism, s.SASLUsername, s.SASLPassword = "SASL_SSL", "PLAIN", "alice", pw
	}
	for _, tc := range []struct {
		name   string
		change func(*Security)
		want   []string
		// atStart: Validate passes, ClientOpts fails.
		atStart bool
	}{
		{"protocol", func(s *Security) { s.Protocol = "TLS" }, []string{`--security-protocol: "TLS", want PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL`}, false},
		{"no mechanism", func(s *Security) { sasl(s); s.SASLMechanism = "" }, []string{"--sasl-mechanism: required by --security-protocol SASL_SSL"}, false},
		{"bad mechanism", func(s *Security) { sasl(s); s.SASLMechanism = "GSSAPI" }, []string{`--sasl-mechanism: "GSSAPI", want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512`}, false},
		{"no user", func(s *Security) { sasl(s); s.SASLUsername = "" }, []string{"--sasl-username: required"}, false},
		{"no password", func(s *Security) { sasl(s); s.SASLPassword = "" }, []string{"--sasl-password: required by --security-protocol SASL_SSL (or --sasl-password-file)"}, false},
		{"password twice", func(s *Security) { sasl(s); s.SASLPasswordFile = writeSecret(t, pw) }, []string{"--sasl-password-file: set with --sasl-password"}, false},
		{"password file missing", func(s *Security) { sasl(s); s.SASLPassword, s.SASLPasswordFile = "", "/nonexistent/pw" }, []string{"--sasl-password-file: open /nonexistent/pw"}, true},
		{"password file empty", func(s *Security) { sasl(s); s.SASLPassword, s.SASLPasswordFile = "", writeSecret(t, "\n") }, []string{"--sasl-password-file: ", "is empty"}, true},
		{"unreadable CA", func(s *Security) { sasl(s); s.TLSCAFile = "/nonexistent/ca.pem" }, []string{"--tls-ca-file: open /nonexistent/ca.pem"}, true},
		{"CA not PEM", func(s *Security) { sasl(s); s.TLSCAFile = writeSecret(t, "not a certificate") }, []string{"--tls-ca-file: ", "holds no PEM certificate"}, true},
		{"cert without key", func(s *Security) { sasl(s); s.TLSCertFile = filepath.Join(dir, "client.pem") }, []string{"--tls-cert-file: set without --tls-key-file"}, false},
		{"key without cert", func(s *Security) { sasl(s); s.TLSKeyFile = filepath.Join(dir, "client-key.pem") }, []string{"--tls-key-file: set without --tls-cert-file"}, false},
		{"key of another cert", func(s *Security) {
			sasl(s)
			s.TLSCertFile, s.TLSKeyFile = filepath.Join(dir, "client.pem"), filepath.Join(certs(t), "client-key.pem")
		}, []string{"--tls-cert-file, --tls-key-file: ", "private key does not match public key"}, true},
		{"TLS without TLS", func(s *Security) { s.TLSCAFile = ca }, []string{"--tls-ca-file: set, but --security-protocol PLAINTEXT uses no TLS"}, false},
		{"SASL without SASL", func(s *Security) {
			s.Protocol, s.SASLUsername, s.SASLPassword = "SSL", "alice", pw
		}, []string{"--sasl-username: set, but --security-protocol SSL uses no SASL", "--sasl-password: set, but"}, false},
		{"SASL_PLAINTEXT with a CA", func(s *Security) { sasl(s); s.Protocol, s.TLSCAFile = "SASL_PLAINTEXT", ca }, []string{"--tls-ca-file: set, but --security-protocol SASL_PLAINTEXT uses no TLS"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.change(&c.Security)
			err := c.Validate()
			if tc.atStart {
				if err != nil {
					t.Fatalf("Validate: %v; it reads no file", err)
				}
				_, err = c.Security.ClientOpts()
			}
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			if strings.Contains(err.Error(), pw) {
				t.Errorf("the error shows the password:\n%v", err)
			}
		})
	}
	for _, ok := range []func(*Security){
		func(s *Security) { sasl(s); s.TLSCAFile = ca },
		func(s *Security) { sasl(s); s.Protocol = "sasl_plaintext"; s.SASLMechanism = "scram-sha-256" },
		func(s *Security) { s.Protocol, s.TLSCAFile, s.TLSServerName = "SSL", ca, "kafka.example" },
	} {
		c := validConfig()
		ok(&c.Security)
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c.Security, err)
		}
		if _, err := c.Security.ClientOpts(); err != nil {
			t.Errorf("%+v: ClientOpts: %v", c.Security, err)
		}
	}
}

// TestPasswordIsNeverPrinted: a Config holding a password shows
// [redacted] wherever it may be printed by mistake, and -h shows none.
func TestPasswordIsNeverPrinted(t *testing.T) {
	const pw = "pw-never-shown-0815"
	c := validConfig()
	c.Security = Security{Protocol: "SASL_PLAINTEXT", SASLMechanism: "PLAIN", SASLUsername: "alice", SASLPassword: pw}
	var out bytes.Buffer
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
		fmt.Fprintf(&out, verb+"\n", c)
		fmt.Fprintf(&out, verb+"\n", c.Security.SASLPassword)
	}
	slog.New(slog.NewTextHandler(&out, nil)).Info("config", "config", c, "security", c.Security)
	slog.New(slog.NewJSONHandler(&out, nil)).Info("config", "config", c, "password", c.Security.SASLPassword)
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	out.Write(b)
	if b, err = yaml.Marshal(c); err != nil {
		t.Fatal(err)
	}
	out.Write(b)
	fmt.Fprintln(&out, c.Security.Describe())
	// -h, with the password from the environment.
	if _, err := Parse([]string{"-h"}, env("WEIR_SASL_PASSWORD", pw), &out); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
	if strings.Contains(out.String(), pw) {
		t.Fatalf("the password is printed:\n%s", out.String())
	}
	if !strings.Contains(out.String(), redacted) || !strings.Contains(out.String(), "--sasl-password-file") {
		t.Errorf("want %s in the dumps and the flags in -h:\n%s", redacted, out.String())
	}
}

func TestExplainKafkaErr(t *testing.T) {
	s := Security{Protocol: "SASL_SSL", SASLMechanism: "scram-sha-256", SASLUsername: "alice", SASLPassword: "pw-0000"}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("partition count: %w", kerr.SaslAuthenticationFailed), `kafka refused the SASL credentials of user "alice" (--sasl-mechanism SCRAM-SHA-256): check --sasl-username and --sasl-password`},
		{kerr.UnsupportedSaslMechanism, "kafka does not take --sasl-mechanism SCRAM-SHA-256"},
		{&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, "check --tls-ca-file"},
		{tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, "check --security-protocol SASL_SSL"},
		{&kgo.ErrFirstReadEOF{}, "check --security-protocol SASL_SSL against the listener's"},
	} {
		got := s.ExplainKafkaErr(tc.err)
		var ue cli.UsageError
		if !strings.Contains(got.Error(), tc.want) || !errors.Is(got, tc.err) || !errors.As(got, &ue) {
			t.Errorf("%v: got %v, want a usage error with %q wrapping it", tc.err, got, tc.want)
		}
	}
	// Without TLS or SASL, a closed first read is a broker going away
	// more likely than a setting: an error to retry, not a usage error.
	plain := Security{}
	eof := &kgo.ErrFirstReadEOF{}
	var ue cli.UsageError
	if got := plain.ExplainKafkaErr(eof); errors.As(got, &ue) || !errors.Is(got, eof) || !strings.Contains(got.Error(), "if it repeats") {
		t.Errorf("PLAINTEXT, first read EOF: %v, want a plain error wrapping it", got)
	}
	if other := errors.New("other"); s.ExplainKafkaErr(other) != other {
		t.Error("an error that is not about security changed")
	}
}

// TestWorkerOverSASLSSL runs a count worker against kfake with TLS and
// SASL SCRAM-SHA-512 enabled, where any request of a client without them
// fails: so every client of the worker (partition count, internal topics,
// lag committer, group, the tasks' sources and sinks, the committables
// check of a restore) takes the security settings. The worker's logs at
// debug and its HTTP pages never show the password. With a wrong password
// the worker fails at start, naming the settings, and shows neither
// password.
func TestWorkerOverSASLSSL(t *testing.T) {
	dir := certs(t)
	const user, pw, wrong = "alice", "pw-right-5a1d77c0", "pw-wrong-93fe02b1"
	serverCert, err := tls.LoadX509KeyPair(filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.pem"))
	if err != nil {
		t.Fatal(err)
	}
	fake, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", user, pw),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{serverCert}, MinVersion: tls.VersionTLS12}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close)
	sec := Security{Protocol: "SASL_SSL", TLSCAFile: filepath.Join(dir, "ca.pem"),
		SASLMechanism: "SCRAM-SHA-512", SASLUsername: user, SASLPasswordFile: writeSecret(t, pw+"\n")}
	opts, err := sec.ClientOpts()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(fake.ListenAddrs()...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	in, out := testcluster.UniqueName(t, "in"), testcluster.UniqueName(t, "out")
	if _, err := kadm.NewClient(cl).CreateTopics(ctx, 2, 1, nil, in, out); err != nil {
		t.Fatal(err)
	}
	produce := func(from, n int) {
		var rs []*kgo.Record
		for i := from; i < from+n; i++ {
			rs = append(rs, &kgo.Record{Topic: in, Key: []byte("k" + strconv.Itoa(i%7)), Value: []byte(strconv.Itoa(i))})
		}
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	cfg := DefaultConfig()
	cfg.Job, cfg.Name, cfg.Brokers, cfg.Input, cfg.Output = "count", testcluster.UniqueName(t, "count"), fake.ListenAddrs(), in, out
	cfg.Security = sec
	cfg.Checkpoints, cfg.StateBackend, cfg.StateDir = "file://"+t.TempDir(), stateBackendMemory, t.TempDir()
	cfg.Interval, cfg.HTTPAddr, cfg.LogLevel = 200*time.Millisecond, "127.0.0.1:0", "debug"
	cfg.SessionTimeout, cfg.HeartbeatInterval = 6*time.Second, 200*time.Millisecond
	jobs := []Job{NewJob("count", count.Build)}
	output := newOutputCounter(t, cfg.Brokers, out, opts)
	logs := &syncBuffer{}
	var pages bytes.Buffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("worker logs:\n%s", logs.String())
		}
	})

	// run runs the worker until the output holds want records, then
	// saves its pages and stops it.
	run := func(want int) {
		t.Helper()
		wctx, stop := context.WithCancel(ctx)
		addrs, done := make(chan string, 1), make(chan error, 1)
		log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		go func() { done <- Run(wctx, cfg, jobs, Options{Logger: log, Listening: func(a string) { addrs <- a }}) }()
		var addr string
		select {
		case addr = <-addrs:
		case err := <-done:
			t.Fatalf("Run: %v", err)
		}
		if n := output.waitFor(ctx, want); n != want {
			t.Fatalf("output has %d records, want %d", n, want)
		}
		for _, p := range []string{"/", "/status.json", "/metrics", "/healthz", "/readyz"} {
			b, err := fetch(ctx, "http://"+addr+p)
			if err != nil && p != "/readyz" {
				t.Errorf("GET %s: %v", p, err)
			}
			pages.Write(b)
		}
		stop()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
	}
	produce(0, 300)
	run(300)
	// Again from the checkpoint: the restore asks the transaction
	// coordinator about the manifest's transactions.
	produce(300, 200)
	run(500)
	if !strings.Contains(logs.String(), "restoring") {
		t.Error("the second run restored nothing")
	}
	if !strings.Contains(logs.String(), `kafka_security="SASL_SSL SCRAM-SHA-512 user alice ca `) {
		t.Errorf("the start line does not say how the worker connects")
	}
	if !strings.Contains(pages.String(), "weir_") {
		t.Errorf("no metrics in the pages:\n%.2000s", pages.String())
	}

	// A wrong password fails at start. kfake hangs up on it where a
	// broker answers SASL_AUTHENTICATION_FAILED, which ExplainKafkaErr
	// turns into a usage error naming the settings: the integration
	// test checks that on the real broker.
	bad := cfg
	bad.Security.SASLPasswordFile, bad.Security.SASLPassword = "", wrong
	err = Run(ctx, bad, jobs, Options{Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err == nil {
		t.Fatal("Run with a wrong password: nil")
	}
	for what, text := range map[string]string{"logs": logs.String(), "HTTP pages": pages.String(), "error": err.Error()} {
		for _, secret := range []string{pw, wrong} {
			if strings.Contains(text, secret) {
				t.Errorf("the %s show a password (%s)", what, secret)
			}
		}
	}
}

// outputCounter counts the records of a topic, read_committed from its
// start, as they arrive.
type outputCounter struct {
	cl *kgo.Client
	n  int
}

func newOutputCounter(t *testing.T, brokers []string, topic string, opts []kgo.Opt) *outputCounter {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &outputCounter{cl: cl}
}

// waitFor reads until the topic held want records or ctx ended, and
// returns how many it read.
func (o *outputCounter) waitFor(ctx context.Context, want int) int {
	for o.n < want && ctx.Err() == nil {
		o.n += o.cl.PollFetches(ctx).NumRecords()
	}
	return o.n
}
