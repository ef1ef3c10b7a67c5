package docs

import (
	"encoding/json"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// weir's one public face for jobs: a job imports stream and the state
// codecs, and a job's main the worker besides (issue 22).
const module = "github.com/weirstream/weir"

var (
	jobFace  = []string{module + "/stream", module + "/state"}
	mainFace = append(slices.Clone(jobFace), module+"/worker")
)

// faceErrors lists the imports of weir in imports that a job (main: its
// main) must not make; own are weir packages it may import besides (a
// main's own job packages).
func faceErrors(imports []string, main bool, own func(string) bool) []string {
	allowed := jobFace
	if main {
		allowed = mainFace
	}
	var bad []string
	for _, imp := range imports {
		if imp != module && !strings.HasPrefix(imp, module+"/") {
			continue
		}
		if !slices.Contains(allowed, imp) && !own(imp) {
			bad = append(bad, imp)
		}
	}
	return bad
}

// TestOneFace: the examples' code (not their tests) and the Go snippets of
// the docs import nothing of weir but stream and state, and worker in a
// main. A job that needs more is a hole in the face: fill it in stream.
func TestOneFace(t *testing.T) {
	out, err := exec.Command("go", "list", "-json", "../examples/...").Output()
	if err != nil {
		t.Fatalf("go list ../examples/...: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	examples := func(imp string) bool { return strings.HasPrefix(imp, module+"/examples/") }
	n := 0
	for dec.More() {
		var p struct {
			ImportPath string
			Name       string
			Imports    []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		n++
		if bad := faceErrors(p.Imports, p.Name == "main", examples); len(bad) > 0 {
			t.Errorf("%s imports %v: a job imports only %v (a main: %v)", p.ImportPath, bad, jobFace, mainFace)
		}
	}
	if n < 5 {
		t.Fatalf("go list found %d example packages", n)
	}

	// Go snippets of the docs: their import blocks.
	fence := regexp.MustCompile("(?s)```go\n(.*?)```")
	docs, _ := filepath.Glob("*.md")
	snippets := 0
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range fence.FindAllStringSubmatch(string(b), -1) {
			src := m[1]
			if !strings.Contains(src, "import") {
				continue
			}
			if !strings.HasPrefix(strings.TrimSpace(src), "package") {
				src = "package snippet\n" + src
			}
			f, err := parser.ParseFile(token.NewFileSet(), doc, src, parser.ImportsOnly)
			if err != nil {
				continue // a fragment, not a file: its imports are not whole
			}
			snippets++
			var imports []string
			for _, s := range f.Imports {
				p, _ := strconv.Unquote(s.Path.Value)
				imports = append(imports, p)
			}
			if bad := faceErrors(imports, f.Name.Name == "main", examples); len(bad) > 0 {
				t.Errorf("a snippet of %s imports %v: a job imports only %v (a main: %v)", doc, bad, jobFace, mainFace)
			}
		}
	}
	if snippets == 0 {
		t.Errorf("no Go snippet with imports in %v: the test checks nothing of the docs", docs)
	}
}

// TestFaceErrors: the rule itself.
func TestFaceErrors(t *testing.T) {
	none := func(string) bool { return false }
	if bad := faceErrors([]string{"fmt", module + "/stream", module + "/state"}, false, none); len(bad) != 0 {
		t.Errorf("a job of stream and state: %v", bad)
	}
	if bad := faceErrors([]string{module + "/runtime", module + "/worker"}, false, none); !slices.Equal(bad, []string{module + "/runtime", module + "/worker"}) {
		t.Errorf("a job of runtime and worker: %v", bad)
	}
	if bad := faceErrors([]string{module + "/worker", module + "/examples/count"}, true, func(p string) bool { return p == module+"/examples/count" }); len(bad) != 0 {
		t.Errorf("a main of worker and its job: %v", bad)
	}
}
