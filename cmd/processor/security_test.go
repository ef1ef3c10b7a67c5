package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/weirstream/weir/internal/testcluster"
	"github.com/weirstream/weir/worker"
)

// TestCommandsTakeSecuritySettings: generate and verify take the worker's
// TLS and SASL settings, refuse bad combinations naming the setting, and
// never print the password.
func TestCommandsTakeSecuritySettings(t *testing.T) {
	const pw = "pw-not-printed-31337"
	for _, tc := range []struct {
		args []string
		env  []string
		want string
	}{
		{[]string{"generate", "--topic", "t", "--security-protocol", "SASL_SSL", "--sasl-username", "u", "--sasl-password", pw}, nil,
			"--sasl-mechanism: required by --security-protocol SASL_SSL"},
		{[]string{"verify", "--input", "a", "--output", "b", "--security-protocol", "SSL", "--tls-ca-file", "/nonexistent/ca.pem"}, nil,
			"--tls-ca-file: open /nonexistent/ca.pem"},
		{[]string{"verify", "--input", "a", "--output", "b", "--sasl-mechanism", "PLAIN"}, []string{"WEIR_SASL_PASSWORD", pw},
			"--sasl-password: set, but --security-protocol PLAINTEXT uses no SASL"},
		{[]string{"run", "--input", "a", "--output", "b", "--security-protocol", "SASL_PLAINTEXT", "--sasl-mechanism", "PLAIN", "--sasl-username", "u", "--sasl-password", pw, "--tls-cert-file", "c.pem"}, nil,
			"--tls-cert-file: set, but --security-protocol SASL_PLAINTEXT uses no TLS"},
	} {
		t.Run(strings.Join(tc.args[:1], " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(context.Background(), tc.args, env(tc.env...), &stdout, &stderr); code != 2 {
				t.Errorf("exit code %d, want 2", code)
			}
			out := stdout.String() + stderr.String()
			if !strings.Contains(out, tc.want) {
				t.Errorf("output lacks %q:\n%s", tc.want, out)
			}
			if strings.Contains(out, pw) {
				t.Errorf("the output shows the password:\n%s", out)
			}
		})
	}
}

// TestGenerateAndReadOverSASL: generate writes and verify's reader reads
// through a SASL_PLAINTEXT listener (kfake refuses every request of an
// unauthenticated connection), so their clients take the settings.
func TestGenerateAndReadOverSASL(t *testing.T) {
	const user, pw = "bob", "pw-plain-8c1e"
	fake, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser("PLAIN", user, pw))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close)
	sec := worker.Security{Protocol: "SASL_PLAINTEXT", SASLMechanism: "PLAIN", SASLUsername: user, SASLPassword: pw}
	opts, err := sec.ClientOpts()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	topic := testcluster.UniqueName(t, "in")
	gen := defaultGenerateConfig()
	gen.Brokers, gen.Security, gen.Topic, gen.Create, gen.Partitions, gen.Records = fake.ListenAddrs(), sec, topic, true, 2, 500
	if n, err := generate(ctx, gen, nil); err != nil || n != 500 {
		t.Fatalf("generate: %d, %v", n, err)
	}
	rs, _, err := readCommitted(ctx, fake.ListenAddrs(), topic, opts...)
	if err != nil || len(rs) != 500 {
		t.Fatalf("readCommitted: %d records, %v; want 500", len(rs), err)
	}
}
