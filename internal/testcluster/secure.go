package testcluster

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// SASL mechanisms of SecureCluster.Users, as Kafka names them.
const (
	MechanismPlain       = "PLAIN"
	MechanismSCRAMSHA256 = "SCRAM-SHA-256"
	MechanismSCRAMSHA512 = "SCRAM-SHA-512"
)

// SecureCluster is a real single-node broker of one test's own with a
// SASL_SSL listener beside its PLAINTEXT one: certificates, users and
// passwords are made for the test and die with it.
type SecureCluster struct {
	// Plaintext is the bootstrap address of the PLAINTEXT listener, for
	// a test's own setup; SASLSSL that of the SASL_SSL listener.
	Plaintext, SASLSSL string
	// CAFile is the PEM certificate of the CA that signed the broker's
	// certificate (for 127.0.0.1, ::1 and localhost). ClientCertFile and
	// ClientKeyFile are a client certificate and key of that CA: the
	// listener asks for one and accepts it, and also takes clients
	// without.
	CAFile, ClientCertFile, ClientKeyFile string
	// Users holds one user per mechanism (MechanismPlain, ...), with a
	// random password.
	Users map[string]User
}

// User is a SASL user of a SecureCluster.
type User struct{ Name, Password string }

// SecureKafka starts a SecureCluster for t with scripts/kafka (its
// WEIR_KAFKA_SASL_SSL) in a directory of t's own, and stops it by its pid
// when t ends. It needs java and the broker's jars (scripts/kafka fetches
// them through mvn the first time): without java it skips t, unless
// WEIR_REQUIRE_JAVA=1, which makes that a failure.
func SecureKafka(t testing.TB) *SecureCluster {
	t.Helper()
	requireJava(t)
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	if err := os.Mkdir(certs, 0o700); err != nil {
		t.Fatal(err)
	}
	c := &SecureCluster{
		CAFile:         filepath.Join(certs, "ca.pem"),
		ClientCertFile: filepath.Join(certs, "client.pem"),
		ClientKeyFile:  filepath.Join(certs, "client-key.pem"),
		Users:          map[string]User{},
	}
	if err := WriteCertificates(certs); err != nil {
		t.Fatalf("certificates: %v", err)
	}
	var users strings.Builder
	for _, m := range []string{MechanismPlain, MechanismSCRAMSHA256, MechanismSCRAMSHA512} {
		u := User{Name: "weir-" + strings.ToLower(m), Password: randomPassword(t)}
		c.Users[m] = u
		fmt.Fprintf(&users, "%s %s %s\n", m, u.Name, u.Password)
	}
	if err := os.WriteFile(filepath.Join(certs, "users"), []byte(users.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "kafka")
	addr, _ := ownBroker(t, state, "WEIR_KAFKA_SASL_SSL="+certs)
	sasl, err := os.ReadFile(filepath.Join(state, "sasl_ssl.address"))
	if err != nil {
		t.Fatalf("scripts/kafka start wrote no SASL_SSL address: %v", err)
	}
	c.Plaintext, c.SASLSSL = addr, strings.TrimSpace(string(sasl))
	t.Logf("SASL_SSL listener at %s", c.SASLSSL)
	return c
}

// requireJava skips t when there is no java to run a broker of its own,
// unless WEIR_REQUIRE_JAVA=1, which makes that a failure.
func requireJava(t testing.TB) {
	t.Helper()
	java := "java"
	if home := os.Getenv("JAVA_HOME"); home != "" {
		java = filepath.Join(home, "bin", "java")
	}
	if _, err := exec.LookPath(java); err != nil {
		if os.Getenv("WEIR_REQUIRE_JAVA") == "1" {
			t.Fatalf("WEIR_REQUIRE_JAVA=1 but there is no java to run a broker: %v", err)
		}
		t.Skipf("no java to run a broker of the test's own (scripts/kafka; WEIR_REQUIRE_JAVA=1 makes this a failure): %v", err)
	}
}

// ownBroker starts a broker of t's own with scripts/kafka in state, with
// env added to the script's environment, and stops it by its pid when t
// ends. It returns the PLAINTEXT bootstrap address and how long the start
// took.
func ownBroker(t testing.TB, state string, env ...string) (string, time.Duration) {
	t.Helper()
	_, self, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(self), "..", "..", "scripts", "kafka")
	env = append(append(os.Environ(), "WEIR_KAFKA_DIR="+state), env...)
	if _, set := os.LookupEnv("WEIR_KAFKA_HEAP"); !set {
		// A few topics and clients; and CI runs the shared broker beside
		// it on two cores.
		env = append(env, "WEIR_KAFKA_HEAP=-Xms128m -Xmx384m")
	}
	kafka := func(ctx context.Context, arg string) (string, string, error) {
		cmd := exec.CommandContext(ctx, script, arg)
		cmd.Env = env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return strings.TrimSpace(stdout.String()), stderr.String(), err
	}
	// Registered before the start, so that a start that fails halfway
	// still stops whatever it started.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, stderr, err := kafka(ctx, "stop"); err != nil {
			t.Errorf("scripts/kafka stop (WEIR_KAFKA_DIR=%s): %v\n%s", state, err, stderr)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	addr, stderr, err := kafka(ctx, "start")
	if err != nil {
		t.Fatalf("scripts/kafka start (WEIR_KAFKA_DIR=%s): %v\n%s", state, err, stderr)
	}
	took := time.Since(start).Round(time.Millisecond)
	t.Logf("kafka provider: a broker of the test's own (scripts/kafka in %s, %v) at %s", state, took, addr)
	return addr, took
}

// randomPassword is 24 random hex digits after "pw": a string that
// appears nowhere by chance, so a test can look for it in output.
func randomPassword(t testing.TB) string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "pw" + hex.EncodeToString(b[:])
}

// WriteCertificates writes a fresh CA and certificates signed by it into
// dir: what a broker reads, server.pem (its certificate chain, then its
// PKCS#8 key; for 127.0.0.1, ::1 and localhost) and ca.pem, and what
// clients use, ca.pem, client.pem and client-key.pem. EC P-256 keys: quick
// to make, and Kafka's PEM key store reads them. They are valid for a day.
func WriteCertificates(dir string) error {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "weir test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	if ca, err = x509.ParseCertificate(caDER); err != nil {
		return err
	}
	leaf := func(serial int64, name string, usage x509.ExtKeyUsage, ips []net.IP, dns []string) (cert, key []byte, err error) {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			IPAddresses:  ips,
			DNSNames:     dns,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			return nil, nil, err
		}
		p8, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			return nil, nil, err
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8}), nil
	}
	serverCert, serverKey, err := leaf(2, "localhost", x509.ExtKeyUsageServerAuth,
		[]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, []string{"localhost"})
	if err != nil {
		return err
	}
	clientCert, clientKey, err := leaf(3, "weir-test-client", x509.ExtKeyUsageClientAuth, nil, nil)
	if err != nil {
		return err
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	for name, b := range map[string][]byte{
		"ca.pem":         caPEM,
		"server.pem":     append(append(serverCert, caPEM...), serverKey...),
		"client.pem":     clientCert,
		"client-key.pem": clientKey,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}
