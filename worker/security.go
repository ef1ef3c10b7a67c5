package worker

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/weirstream/weir/internal/cli"
)

// Security protocols of --security-protocol, as Kafka's clients name them
// (security.protocol).
const (
	ProtocolPlaintext     = "PLAINTEXT"
	ProtocolSSL           = "SSL"
	ProtocolSASLPlaintext = "SASL_PLAINTEXT"
	ProtocolSASLSSL       = "SASL_SSL"
)

// SASL mechanisms of --sasl-mechanism.
const (
	MechanismPlain       = "PLAIN"
	MechanismSCRAMSHA256 = "SCRAM-SHA-256"
	MechanismSCRAMSHA512 = "SCRAM-SHA-512"
)

// Security is how a process's Kafka clients reach the brokers: TLS and
// SASL, with the settings and names of Kafka's own clients. The worker's
// Config has one, and so do the processor's commands that talk to Kafka
// (generate, verify), so that every client of a process authenticates
// alike: build their options with ClientOpts, nowhere else.
//
// The password is a Secret: printing a Security, or a Config holding one,
// shows [redacted], and no error of ClientOpts or Validate contains it.
type Security struct {
	// Protocol is PLAINTEXT (the default), SSL, SASL_PLAINTEXT or
	// SASL_SSL.
	Protocol string
	// TLSCAFile is a PEM file of the certificate authorities that sign
	// the brokers' certificates. Default: the system's roots. SSL and
	// SASL_SSL only, as are the other TLS settings.
	TLSCAFile string
	// TLSCertFile and TLSKeyFile are the PEM certificate and private key
	// the client presents, for brokers that authenticate clients by
	// certificate (ssl.client.auth). Both or neither.
	TLSCertFile string
	TLSKeyFile  string
	// TLSServerName is the name the brokers' certificates must carry.
	// Default: the host of each address dialled.
	TLSServerName string
	// SASLMechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; required
	// by the SASL protocols, refused by the others.
	SASLMechanism string
	// SASLUsername and SASLPassword are the SASL credentials. The
	// password can come from SASLPasswordFile instead (its contents
	// without the final line break), so that it need not be on a
	// command line or in the environment; one of the two, not both.
	SASLUsername     string
	SASLPassword     Secret
	SASLPasswordFile string
}

// Secret is a setting that must not be printed: fmt, log/slog, JSON and
// YAML show it as [redacted] (empty stays empty). Convert it to a string
// where the value is used.
type Secret string

const redacted = "[redacted]"

func (s Secret) show() string {
	if s == "" {
		return ""
	}
	return redacted
}

func (s Secret) String() string   { return s.show() }
func (s Secret) GoString() string { return fmt.Sprintf("%q", s.show()) }

// MarshalText keeps the value out of encoding/json and YAML dumps.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.show()), nil }

// secretFlag binds a Secret to a flag without ever printing it: flag's
// -h output and errors call String.
type secretFlag struct{ p *Secret }

func (f secretFlag) String() string {
	if f.p == nil {
		return ""
	}
	return f.p.show()
}

func (f secretFlag) Set(v string) error { *f.p = Secret(v); return nil }

// RegisterFlags binds s's fields to fs; the values in s are the defaults.
func (s *Security) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&s.Protocol, "security-protocol", s.Protocol, "how to reach the brokers: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (default PLAINTEXT)")
	fs.StringVar(&s.TLSCAFile, "tls-ca-file", s.TLSCAFile, "PEM file of the CAs that sign the brokers' certificates (SSL, SASL_SSL; default: the system's)")
	fs.StringVar(&s.TLSCertFile, "tls-cert-file", s.TLSCertFile, "PEM client certificate, for brokers that authenticate clients by certificate (with --tls-key-file)")
	fs.StringVar(&s.TLSKeyFile, "tls-key-file", s.TLSKeyFile, "PEM private key of --tls-cert-file")
	fs.StringVar(&s.TLSServerName, "tls-server-name", s.TLSServerName, "name the brokers' certificates must carry (default: the host dialled)")
	fs.StringVar(&s.SASLMechanism, "sasl-mechanism", s.SASLMechanism, "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (SASL_PLAINTEXT, SASL_SSL)")
	fs.StringVar(&s.SASLUsername, "sasl-username", s.SASLUsername, "SASL user name")
	fs.Var(secretFlag{&s.SASLPassword}, "sasl-password", "SASL password (never printed; prefer --sasl-password-file or WEIR_SASL_PASSWORD to keep it off command lines)")
	fs.StringVar(&s.SASLPasswordFile, "sasl-password-file", s.SASLPasswordFile, "file holding the SASL password (without its final line break)")
}

// Validate reports every bad combination of settings, joined, each naming
// its flag. It reads no file: ClientOpts does, at start.
func (s *Security) Validate() error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, args...)))
	}
	proto := s.protocol()
	useTLS, useSASL, ok := s.layers()
	if !ok {
		bad("security-protocol", "%q, want PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL", s.Protocol)
		return errors.Join(errs...)
	}
	switch {
	case !useTLS:
		// A TLS setting without TLS is a mistake the broker would only
		// report as a dropped connection.
		for _, f := range []struct{ flag, v string }{
			{"tls-ca-file", s.TLSCAFile}, {"tls-cert-file", s.TLSCertFile},
			{"tls-key-file", s.TLSKeyFile}, {"tls-server-name", s.TLSServerName},
		} {
			if f.v != "" {
				bad(f.flag, "set, but --security-protocol %s uses no TLS (want SSL or SASL_SSL)", proto)
			}
		}
	case s.TLSCertFile != "" && s.TLSKeyFile == "":
		bad("tls-cert-file", "set without --tls-key-file, its private key")
	case s.TLSCertFile == "" && s.TLSKeyFile != "":
		bad("tls-key-file", "set without --tls-cert-file, its certificate")
	}
	if !useSASL {
		for _, f := range []struct{ flag, v string }{
			{"sasl-mechanism", s.SASLMechanism}, {"sasl-username", s.SASLUsername},
			{"sasl-password", string(s.SASLPassword)}, {"sasl-password-file", s.SASLPasswordFile},
		} {
			if f.v != "" {
				bad(f.flag, "set, but --security-protocol %s uses no SASL (want SASL_PLAINTEXT or SASL_SSL)", proto)
			}
		}
		return errors.Join(errs...)
	}
	switch s.mechanismName() {
	case MechanismPlain, MechanismSCRAMSHA256, MechanismSCRAMSHA512:
	case "":
		bad("sasl-mechanism", "required by --security-protocol %s: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", proto)
	default:
		bad("sasl-mechanism", "%q, want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", s.SASLMechanism)
	}
	if s.SASLUsername == "" {
		bad("sasl-username", "required by --security-protocol %s", proto)
	}
	switch {
	case s.SASLPassword != "" && s.SASLPasswordFile != "":
		bad("sasl-password-file", "set with --sasl-password: want one of them")
	case s.SASLPassword == "" && s.SASLPasswordFile == "":
		bad("sasl-password", "required by --security-protocol %s (or --sasl-password-file)", proto)
	}
	return errors.Join(errs...)
}

// ClientOpts are the franz-go options that make a client connect as s
// says: none for PLAINTEXT. Every bad setting is reported, joined, each
// naming its flag. The files are read now (a certificate or password file
// replaced later takes effect at the next start), so call it at start.
func (s *Security) ClientOpts() ([]kgo.Opt, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	useTLS, useSASL, _ := s.layers()
	var (
		opts []kgo.Opt
		errs []error
	)
	if useTLS {
		tc, err := s.tlsConfig()
		if err != nil {
			errs = append(errs, err)
		} else {
			opts = append(opts, kgo.DialTLSConfig(tc))
		}
	}
	if useSASL {
		pass, err := s.password()
		if err != nil {
			errs = append(errs, err)
		} else {
			opts = append(opts, kgo.SASL(s.mechanism(pass)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return opts, nil
}

// layers says whether the protocol uses TLS and SASL; !ok for one that is
// not Kafka's.
func (s *Security) layers() (useTLS, useSASL, ok bool) {
	switch s.protocol() {
	case ProtocolPlaintext:
		return false, false, true
	case ProtocolSSL:
		return true, false, true
	case ProtocolSASLPlaintext:
		return false, true, true
	case ProtocolSASLSSL:
		return true, true, true
	}
	return false, false, false
}

// protocol is Protocol in Kafka's spelling; empty is PLAINTEXT.
func (s *Security) protocol() string {
	p := strings.ToUpper(strings.TrimSpace(s.Protocol))
	if p == "" {
		return ProtocolPlaintext
	}
	return p
}

func (s *Security) mechanismName() string { return strings.ToUpper(strings.TrimSpace(s.SASLMechanism)) }

// tlsConfig reads the TLS files; Validate has checked the combination.
func (s *Security) tlsConfig() (*tls.Config, error) {
	var errs []error
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: s.TLSServerName}
	if s.TLSCAFile != "" {
		pem, err := os.ReadFile(s.TLSCAFile)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("--tls-ca-file: %w", err))
		default:
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				errs = append(errs, fmt.Errorf("--tls-ca-file: %s holds no PEM certificate", s.TLSCAFile))
			}
		}
	}
	if s.TLSCertFile != "" {
		// The errors of LoadX509KeyPair name files and what is wrong
		// with them, never the key's bytes.
		cert, err := tls.LoadX509KeyPair(s.TLSCertFile, s.TLSKeyFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("--tls-cert-file, --tls-key-file: %w", err))
		} else {
			tc.Certificates = []tls.Certificate{cert}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return tc, nil
}

// mechanism is the SASL mechanism of s with password pass; Validate has
// checked the name.
func (s *Security) mechanism(pass string) sasl.Mechanism {
	switch s.mechanismName() {
	case MechanismPlain:
		return plain.Auth{User: s.SASLUsername, Pass: pass}.AsMechanism()
	case MechanismSCRAMSHA256:
		return scram.Auth{User: s.SASLUsername, Pass: pass}.AsSha256Mechanism()
	default:
		return scram.Auth{User: s.SASLUsername, Pass: pass}.AsSha512Mechanism()
	}
}

// password is the SASL password from --sasl-password or
// --sasl-password-file. Its errors name the file, never its contents.
func (s *Security) password() (string, error) {
	if s.SASLPasswordFile == "" {
		return string(s.SASLPassword), nil
	}
	b, err := os.ReadFile(s.SASLPasswordFile)
	if err != nil {
		// The *PathError names the file and the failure only.
		return "", fmt.Errorf("--sasl-password-file: %w", err)
	}
	// A file written by echo or an editor ends with a line break that is
	// not part of the password.
	p := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if p == "" {
		return "", fmt.Errorf("--sasl-password-file: %s is empty", s.SASLPasswordFile)
	}
	return p, nil
}

// ExplainKafkaErr says what to check when a client of s failed to
// authenticate or to set up TLS: it returns err in a cli.UsageError (a bad
// setting, exit code 2) that names the settings, as franz-go's errors say
// what went wrong but not which setting to change. Other errors are
// returned as they are.
func (s *Security) ExplainKafkaErr(err error) error {
	if err == nil {
		return nil
	}
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		record    tls.RecordHeaderError
		op        *net.OpError
		eof       *kgo.ErrFirstReadEOF
	)
	var why string
	switch {
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		// The broker's message says the credentials are wrong; it names
		// neither the user nor the password.
		from := "--sasl-password"
		if s.SASLPasswordFile != "" {
			from = "--sasl-password-file " + s.SASLPasswordFile
		}
		why = fmt.Sprintf("kafka refused the SASL credentials of user %q (--sasl-mechanism %s): check --sasl-username and %s", s.SASLUsername, s.mechanismName(), from)
	case errors.Is(err, kerr.UnsupportedSaslMechanism), errors.Is(err, kerr.IllegalSaslState):
		why = fmt.Sprintf("kafka does not take --sasl-mechanism %s on this listener", s.mechanismName())
	case errors.As(err, &unknownCA):
		why = "the broker's certificate is signed by an authority not trusted: check --tls-ca-file"
	case errors.As(err, &hostname):
		why = "the broker's certificate does not carry the name dialled: check --brokers or --tls-server-name"
	case errors.As(err, &invalid):
		why = "the broker's certificate is not valid"
	case errors.As(err, &record):
		why = fmt.Sprintf("the broker did not answer TLS (a PLAINTEXT or SASL_PLAINTEXT listener?): check --security-protocol %s", s.protocol())
	case errors.As(err, &op) && op.Op == "remote error":
		// A TLS alert from the broker: most often a client certificate
		// it wants and did not get or does not trust.
		why = "the broker ended the TLS handshake: check --tls-cert-file and --tls-key-file"
	case errors.As(err, &eof) && s.protocol() == "PLAINTEXT":
		// A broker going away (a restart, a connection quota) closes the
		// first read too: without TLS or SASL on this side, that is the
		// likelier cause, and a retry, not a setting, mends it (exit 1).
		return fmt.Errorf("%w (if it repeats, check --security-protocol %s against the listener's)", err, s.protocol())
	case errors.As(err, &eof):
		// franz-go's guess at why the broker hung up names TLS or SASL
		// on one side and not the other.
		why = fmt.Sprintf("check --security-protocol %s against the listener's", s.protocol())
	default:
		return err
	}
	return cli.UsageError{Err: fmt.Errorf("%s: %w", why, err)}
}

// Describe says how s connects, for logs: the protocol, the mechanism and
// the user, the CA file; never the password.
func (s *Security) Describe() string {
	d := s.protocol()
	if s.SASLMechanism != "" {
		d += " " + s.mechanismName() + " user " + s.SASLUsername
	}
	if s.TLSCAFile != "" {
		d += " ca " + s.TLSCAFile
	}
	if s.TLSCertFile != "" {
		d += " cert " + s.TLSCertFile
	}
	return d
}
