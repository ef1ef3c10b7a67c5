package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/internal/testcluster"
)

// TestSASLSSL runs the count job through a worker process over TLS and
// SASL, on a real broker of the test's own with a SASL_SSL listener
// (testcluster.SecureKafka: scripts/kafka with certificates and users the
// test makes), once per mechanism: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512.
// Each time generate writes the input, verify must find the output exactly
// once, and the worker must drain on SIGTERM; a worker and a verify with a
// wrong password must fail with an error that says what to check. The
// settings reach the processes three ways, one per mechanism: flags (with
// a client certificate and --sasl-password-file), WEIR_ variables, and
// the worker's YAML settings file. Nothing any process printed, nor the
// worker's status page, /status.json or /metrics, may contain a password.
//
// It starts a JVM of its own, so it runs where real-broker tests are
// asked for (KAFKA_BROKERS set, as in .ci/run's integration step and make
// integration against a broker) or with WEIR_SASL_SSL_TEST=1.
func TestSASLSSL(t *testing.T) {
	if os.Getenv("KAFKA_BROKERS") == "" && os.Getenv("WEIR_SASL_SSL_TEST") != "1" {
		t.Skip("starts a broker of its own with a SASL_SSL listener (java, scripts/kafka): runs with KAFKA_BROKERS set, " +
			"as in the real-broker pass of .ci/run, or with WEIR_SASL_SSL_TEST=1")
	}
	c := testcluster.SecureKafka(t)
	for _, mech := range []string{testcluster.MechanismPlain, testcluster.MechanismSCRAMSHA256, testcluster.MechanismSCRAMSHA512} {
		t.Run(mech, func(t *testing.T) { testSASLSSL(t, c, mech) })
	}
	t.Run("misconfigured", func(t *testing.T) { testSecurityMisconfigured(t, c) })
}

// testSecurityMisconfigured: a client that cannot connect because of a
// setting fails at once with exit code 2, naming the setting to check.
func testSecurityMisconfigured(t *testing.T, c *testcluster.SecureCluster) {
	ps := newProcs(t)
	user := c.Users[testcluster.MechanismSCRAMSHA256]
	sasl := []string{"--sasl-mechanism", testcluster.MechanismSCRAMSHA256, "--sasl-username", user.Name}
	ps.env = append(ps.env, "WEIR_SASL_PASSWORD="+user.Password)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no CA", append([]string{"--brokers", c.SASLSSL, "--security-protocol", "SASL_SSL"}, sasl...), "check --tls-ca-file"},
		{"another name", append([]string{"--brokers", c.SASLSSL, "--security-protocol", "SASL_SSL", "--tls-ca-file", c.CAFile,
			"--tls-server-name", "kafka.example"}, sasl...), "check --brokers or --tls-server-name"},
		{"TLS to PLAINTEXT", append([]string{"--brokers", c.Plaintext, "--security-protocol", "SASL_SSL", "--tls-ca-file", c.CAFile}, sasl...),
			"check --security-protocol SASL_SSL against the listener's"},
		{"mechanism of another user", []string{"--brokers", c.SASLSSL, "--security-protocol", "SASL_SSL", "--tls-ca-file", c.CAFile,
			"--sasl-mechanism", testcluster.MechanismSCRAMSHA512, "--sasl-username", user.Name}, "check --sasl-username and --sasl-password"},
	} {
		p := ps.start("verify, "+tc.name, append([]string{"verify", "--input", "in", "--output", "out", "--timeout", "30s"}, tc.args...)...)
		err := p.ExitErr(time.Minute)
		o := strings.Join(p.Lines(), "\n")
		if code := exitCode(err); code != 2 || !strings.Contains(o, tc.want) {
			t.Errorf("%s: exit %d, want 2 and %q:\n%s", tc.name, code, tc.want, o)
		}
		if strings.Contains(o, user.Password) {
			t.Errorf("%s: the output shows the password", tc.name)
		}
		t.Logf("%s: %s", tc.name, o[strings.LastIndex(o, "\n")+1:])
	}
}

func testSASLSSL(t *testing.T, c *testcluster.SecureCluster, mech string) {
	user := c.Users[mech]
	const wrong = "pw-wrong-0d15ea5e"
	ps := newProcs(t)
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "password")
	if err := os.WriteFile(pwFile, []byte(user.Password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// flags are what generate and verify get on their command lines, run
	// the worker's: the same settings, the three ways.
	var flags, runFlags []string
	switch mech {
	case testcluster.MechanismPlain:
		flags = []string{"--security-protocol", "SASL_SSL", "--tls-ca-file", c.CAFile,
			"--tls-cert-file", c.ClientCertFile, "--tls-key-file", c.ClientKeyFile,
			"--sasl-mechanism", mech, "--sasl-username", user.Name, "--sasl-password-file", pwFile}
		runFlags = flags
	case testcluster.MechanismSCRAMSHA256:
		// The certificate carries localhost too; the address dialled
		// is 127.0.0.1.
		ps.env = append(ps.env, "WEIR_SECURITY_PROTOCOL=SASL_SSL", "WEIR_TLS_CA_FILE="+c.CAFile,
			"WEIR_TLS_SERVER_NAME=localhost", "WEIR_SASL_MECHANISM="+mech,
			"WEIR_SASL_USERNAME="+user.Name, "WEIR_SASL_PASSWORD="+user.Password)
	default:
		flags = []string{"--security-protocol", "SASL_SSL", "--tls-ca-file", c.CAFile,
			"--sasl-mechanism", mech, "--sasl-username", user.Name, "--sasl-password-file", pwFile}
		settings := filepath.Join(dir, "weir.yaml")
		yaml := fmt.Sprintf("security-protocol: SASL_SSL\ntls-ca-file: %s\nsasl-mechanism: %s\nsasl-username: %s\nsasl-password-file: %s\n",
			c.CAFile, mech, user.Name, pwFile)
		if err := os.WriteFile(settings, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		runFlags = []string{"--config", settings}
	}
	brokers := []string{"--brokers", c.SASLSSL}
	in, out, name := testcluster.UniqueName(t, "in"), testcluster.UniqueName(t, "out"), testcluster.UniqueName(t, "job")
	var all []*proc // whose output must not show a password

	// done runs a short command to its end and returns its output.
	done := func(p *proc) (string, error) {
		t.Helper()
		all = append(all, p)
		err := p.ExitErr(2 * time.Minute)
		return strings.Join(p.Lines(), "\n"), err
	}
	const records = 1000
	for _, topic := range []struct {
		name string
		n    int
	}{{in, records}, {out, 0}} {
		gen := append([]string{"generate", "--topic", topic.name, "--create", "--partitions", "2", "--records", fmt.Sprint(topic.n), "--keys", "37"}, brokers...)
		if o, err := done(ps.start("generate "+topic.name, append(gen, flags...)...)); err != nil {
			t.Fatalf("generate: %v\n%s", err, o)
		}
	}

	worker := ps.start("worker", append(append([]string{"run", "--job", "count", "--name", name,
		"--input", in, "--output", out, "--checkpoints", "file://" + filepath.Join(dir, "checkpoints"),
		"--state-dir", filepath.Join(dir, "state"), "--state-backend", "memory", "--interval", "500ms",
		"--http-addr", "127.0.0.1:0", "--log-level", "debug"}, brokers...), runFlags...)...)
	all = append(all, worker)
	addr := httpAddr(ctx, t, worker)
	if _, line, err := worker.WaitLine(ctx, 0, isMsg("starting", -1)); err != nil {
		t.Fatal(err)
	} else if sec, _ := logAttr(line, "kafka_security"); !strings.HasPrefix(sec, "SASL_SSL "+mech+" user "+user.Name) {
		t.Errorf("the start line says the worker connects as %q", sec)
	}

	verify := append([]string{"verify", "--input", in, "--output", out, "--wait", "60s"}, brokers...)
	o, err := done(ps.start("verify", append(verify, flags...)...))
	if err != nil || !strings.Contains(o, fmt.Sprintf("records in %d, records out %d, duplicates 0, missing 0, wrong sums 0", records, records)) {
		t.Fatalf("verify over %s: %v\n%s", mech, err, o)
	}
	var pages strings.Builder
	for _, p := range []string{"/", "/status.json", "/metrics", "/healthz", "/readyz"} {
		b, err := get(ctx, "http://"+addr+p)
		if err != nil {
			t.Errorf("GET %s: %v", p, err)
		}
		fmt.Fprintf(&pages, "--- %s\n%s\n", p, b)
	}
	if !strings.Contains(pages.String(), "weir_records_out_total") {
		t.Errorf("/metrics shows no weir_records_out_total:\n%.3000s", pages.String())
	}
	if err, graceful := worker.Terminate(60 * time.Second); err != nil || !graceful {
		t.Fatalf("worker after SIGTERM: %v (graceful %v)", err, graceful)
	}

	// A wrong password: the worker and verify exit 2 (a bad setting) and
	// say which settings to check. It comes the way the right one came.
	wrongFile := filepath.Join(dir, "wrong-password")
	if err := os.WriteFile(wrongFile, []byte(wrong+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badFlags, badRun := replaceArg(flags, pwFile, wrongFile), replaceArg(runFlags, pwFile, wrongFile)
	switch mech {
	case testcluster.MechanismSCRAMSHA256:
		ps.env = append(ps.env, "WEIR_SASL_PASSWORD="+wrong) // the last of a name wins
	case testcluster.MechanismSCRAMSHA512:
		badRun = append(badRun, "--sasl-password-file", wrongFile) // the flag wins over the file
	}
	o, err = done(ps.start("worker, wrong password", append(append([]string{"run", "--job", "count", "--name", name,
		"--input", in, "--output", out, "--checkpoints", "file://" + filepath.Join(dir, "checkpoints"),
		"--state-dir", filepath.Join(dir, "state-bad"), "--http-addr", "off"}, brokers...), badRun...)...))
	if code := exitCode(err); code != 2 || !strings.Contains(o, fmt.Sprintf("kafka refused the SASL credentials of user %q", user.Name)) ||
		!strings.Contains(o, "check --sasl-username and --sasl-password") || !strings.Contains(o, "SASL_AUTHENTICATION_FAILED") {
		t.Errorf("worker with a wrong password: exit %d, want 2 and an error naming the settings:\n%s", code, o)
	}
	t.Logf("worker with a wrong password: %s", o[strings.LastIndex(o, "\n")+1:])
	o, err = done(ps.start("verify, wrong password", append(append([]string{"verify", "--input", in, "--output", out}, brokers...), badFlags...)...))
	if code := exitCode(err); code != 2 || !strings.Contains(o, "check --sasl-username and --sasl-password") {
		t.Errorf("verify with a wrong password: exit %d, want 2 and an error naming the settings:\n%s", code, o)
	}
	t.Logf("verify with a wrong password: %s", o[strings.LastIndex(o, "\n")+1:])

	for _, p := range all {
		text := strings.Join(p.Lines(), "\n")
		for _, secret := range []string{user.Password, wrong} {
			if strings.Contains(text, secret) {
				t.Errorf("the output of %s shows a password (%s)", p.name, secret)
			}
		}
	}
	if strings.Contains(pages.String(), user.Password) {
		t.Errorf("the worker's pages show the password:\n%s", pages.String())
	}
}

// replaceArg returns args with each old replaced by new.
func replaceArg(args []string, old, new string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == old {
			a = new
		}
		out[i] = a
	}
	return out
}

// exitCode is the exit code of a process that ended with err.
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// get GETs url and returns the body; a status other than 200 is an error
// (with the body).
func get(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s", resp.Status)
	}
	return string(b), err
}
