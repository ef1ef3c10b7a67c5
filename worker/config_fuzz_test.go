package worker

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/weirstream/weir/internal/cli"
	"github.com/weirstream/weir/internal/fuzzseed"
)

// Fuzz targets for the worker's configuration: a setting's value from the
// command line, the environment or the settings file, and the settings
// file itself. A bad setting must be an error naming it, never a panic.
// Their seeds run with plain go test; to search, run one at a time:
//
//	go test -run '^$' -fuzz '^FuzzParseSetting$' -fuzztime 5m -parallel 1 ./worker

// fuzzSeed is one seed of a fuzz target (internal/fuzzseed).
type fuzzSeed = fuzzseed.Seed

// fuzzedSettings are the flags FuzzParseSetting sets, sorted. Not those
// that name a file to read (--config and the *-file ones): a fuzzed path
// could name /dev/zero or a FIFO, which Parse would read without end.
func fuzzedSettings() []string {
	c := DefaultConfig()
	fs := flag.NewFlagSet("fuzz", flag.ContinueOnError)
	c.RegisterFlags(fs)
	var names []string
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name != "config" && !strings.HasSuffix(f.Name, "-file") {
			names = append(names, f.Name)
		}
	})
	slices.Sort(names)
	return names
}

// Where FuzzParseSetting puts the setting.
const (
	onCommandLine = iota
	inEnvironment
	inFile
	places
)

// FuzzParseSetting sets one setting, named by which, to value, on the
// command line, in the environment or in the settings file (where), next
// to a valid configuration. Parse either takes it, and then the flag's
// printed value, set again, gives the same configuration; or fails with
// a usage error that names the setting.
func FuzzParseSetting(f *testing.F) {
	names := fuzzedSettings()
	fuzzseed.Add(f, []fuzzSeed{
		{Name: "interval", Args: []any{"interval", "250ms", uint8(onCommandLine)}},
		{Name: "bad-interval", Args: []any{"interval", "1 second", uint8(inEnvironment)}},
		{Name: "zero-interval", Args: []any{"interval", "0", uint8(inFile)}},
		{Name: "brokers", Args: []any{"brokers", " a:1, [::1]:2 ,", uint8(inFile)}},
		{Name: "bad-broker", Args: []any{"brokers", "localhost", uint8(onCommandLine)}},
		{Name: "tasks", Args: []any{"tasks", "0,2,1", uint8(inEnvironment)}},
		{Name: "tasks-twice", Args: []any{"tasks", "1,1", uint8(onCommandLine)}},
		{Name: "tasks-overflow", Args: []any{"tasks", "99999999999999999999", uint8(inFile)}},
		{Name: "memtable", Args: []any{"state-memtable-size", "4GiB", uint8(onCommandLine)}},
		{Name: "cache-unit", Args: []any{"state-cache-size", "64MB", uint8(inEnvironment)}},
		{Name: "start-time", Args: []any{"start", "2026-01-02T03:04:05+01:00", uint8(inFile)}},
		{Name: "start-bad", Args: []any{"start", "yesterday", uint8(onCommandLine)}},
		{Name: "checkpoints-s3", Args: []any{"checkpoints", "s3://b/p?region=eu-west-1&part_size=x", uint8(onCommandLine)}},
		{Name: "checkpoints-s3-user", Args: []any{"checkpoints", "s3://k:s@b/p", uint8(inEnvironment)}},
		{Name: "same-topics", Args: []any{"input", "out", uint8(onCommandLine)}},
		{Name: "epoch-without-tasks", Args: []any{"epoch", "7", uint8(inFile)}},
		{Name: "session-timeout", Args: []any{"session-timeout", "2s", uint8(onCommandLine)}},
		{Name: "tolerable-failures", Args: []any{"tolerable-failures", "100", uint8(inEnvironment)}},
		{Name: "http-addr", Args: []any{"http-addr", "no-port", uint8(inFile)}},
		{Name: "log-level", Args: []any{"log-level", "DEBUG+2", uint8(onCommandLine)}},
		{Name: "bool", Args: []any{"allow-non-restored-state", "maybe", uint8(inEnvironment)}},
		{Name: "yaml-looking", Args: []any{"delivery", "[exactly-once]", uint8(inFile)}},
	})
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, which, value string, where uint8) {
		// Seeds name their setting, so that they keep it as flags come
		// and go; a mutated name picks one by its bytes.
		name := which
		if !slices.Contains(names, name) {
			sum := 0
			for _, c := range []byte(which) {
				sum += int(c)
			}
			name = names[sum%len(names)]
		}
		settings := map[string]string{"input": "in", "output": "out", name: value}
		args, lookup, path := place(t, dir, settings, where%places)
		c, err := Parse(args, lookup, io.Discard)
		if err != nil {
			checkNamesSetting(t, err, name, path, value)
			return
		}
		if where%places == inFile || name == "sasl-password" {
			return // YAML may hold text otherwise; a secret prints hidden
		}
		// What Parse took prints as a value that Parse takes to the same
		// configuration: the status page and --help show these.
		fs := flag.NewFlagSet("print", flag.ContinueOnError)
		c.RegisterFlags(fs)
		printed := fs.Lookup(name).Value.String()
		settings[name] = printed
		args, lookup, _ = place(t, dir, settings, onCommandLine)
		c2, err := Parse(args, lookup, io.Discard)
		if err != nil || !reflect.DeepEqual(c2, c) {
			t.Fatalf("--%s=%q parses to %+v; its printed value %q to %+v, %v", name, value, c, printed, c2, err)
		}
	})
}

// place puts settings where says and returns Parse's arguments, its
// environment and the settings file's path ("" if none).
func place(t *testing.T, dir string, settings map[string]string, where uint8) (args []string, lookup func(string) (string, bool), path string) {
	t.Helper()
	env := map[string]string{}
	lookup = func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	switch where {
	case onCommandLine:
		for _, k := range sortedKeys(settings) {
			args = append(args, "--"+k+"="+settings[k])
		}
	case inEnvironment:
		for k, v := range settings {
			env[cli.EnvName(k)] = v
		}
	case inFile:
		b, err := yaml.Marshal(settings)
		if err != nil {
			t.Fatal(err)
		}
		path = filepath.Join(dir, "weir.yaml")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		args = []string{"--config", path}
	}
	return args, lookup, path
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// checkNamesSetting fails t unless err is a usage error that names the
// setting name: as a flag (--name, or -name as package flag writes it),
// as a key of the settings file at path, or, for the one clash Validate
// reports on the other topic, by what it is. A change of one setting can
// make another one's check fail (a longer --interval, a too short
// --txn-timeout): that error names both.
func checkNamesSetting(t *testing.T, err error, name, path, value string) {
	t.Helper()
	var ue cli.UsageError
	if !errors.As(err, &ue) {
		t.Fatalf("--%s=%q: error %v (%T) is not a usage error", name, value, err, err)
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "--"+name), strings.Contains(msg, " -"+name+":"):
	case path != "" && strings.Contains(msg, path+": "+name):
	case name == "input" && strings.Contains(msg, "is also the input topic"):
	default:
		t.Fatalf("--%s=%q: the error does not name the setting:\n%v", name, value, err)
	}
}

// FuzzConfigFile: no settings file makes Parse panic; every error it
// reports names the file or the setting it is about.
func FuzzConfigFile(f *testing.F) {
	fuzzseed.Add(f, []fuzzSeed{
		{Name: "valid", Args: []any{[]byte("input: in\noutput: out\nbrokers: [a:1, b:2]\ntasks:\n  - 0\n  - 3\ninterval: 500ms\nstate-backend: memory\n")}},
		{Name: "unknown-key", Args: []any{[]byte("input: in\noutput: out\nbroker: a:1\n")}},
		{Name: "config-key", Args: []any{[]byte("config: other.yaml\n")}},
		{Name: "nested", Args: []any{[]byte("input: {topic: in}\noutput: [[out]]\n")}},
		{Name: "bad-values", Args: []any{[]byte("input: in\noutput: out\ninterval: soon\ntasks: x\nstate-cache-size: 1TB\n")}},
		{Name: "not-a-mapping", Args: []any{[]byte("- input\n- output\n")}},
		{Name: "scalar", Args: []any{[]byte("in\n")}},
		{Name: "syntax", Args: []any{[]byte("input: [in\n")}},
		{Name: "duplicate", Args: []any{[]byte("input: a\ninput: b\n")}},
		{Name: "alias", Args: []any{[]byte("input: &t in\noutput: *t\nx: &m {input: in}\n<<: *m\n")}},
		{Name: "two-documents", Args: []any{[]byte("input: in\n---\noutput: out\n")}},
		{Name: "null-and-tags", Args: []any{[]byte("input: ~\noutput: !!binary b3V0\ninterval: !!int 5\n")}},
		{Name: "tab-and-bom", Args: []any{[]byte("\ufeffinput:\tin\n")}},
		{Name: "empty", Args: []any{[]byte("")}},
	})
	dir := f.TempDir()
	path := filepath.Join(dir, "weir.yaml")
	f.Fuzz(func(t *testing.T, content []byte) {
		if err := os.WriteFile(path, content, 0o644); err != nil {
			t.Fatal(err)
		}
		none := func(string) (string, bool) { return "", false }
		_, err := Parse([]string{"--config", path}, none, io.Discard)
		if err == nil {
			return
		}
		var ue cli.UsageError
		if !errors.As(err, &ue) {
			t.Fatalf("error %v (%T) is not a usage error", err, err)
		}
		for _, e := range leaves(ue.Err) {
			if msg := e.Error(); !strings.Contains(msg, path) && !strings.HasPrefix(msg, "--") {
				t.Fatalf("an error names neither the file nor a setting: %q\nof %v", msg, err)
			}
		}
	})
}

// leaves returns the errors errors.Join joined in err, recursively.
func leaves(err error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, leaves(e)...)
	}
	return out
}
