package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// docCommand is one command line of a ```sh block.
type docCommand struct {
	file string // slash path from the repository root
	line int    // its first line, 1-based
	// text is the command as the table knows it: continuation lines
	// joined, the comment removed, its words (quoted as written) separated
	// by one blank.
	text string
}

// shellInfo are the info strings of fenced blocks that hold commands.
var shellInfo = map[string]bool{"sh": true, "bash": true, "shell": true, "zsh": true, "console": true}

// readCommands returns the commands of the shell blocks of the Markdown
// file rel (relative to root).
func readCommands(root, rel string) ([]docCommand, error) {
	data, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		return nil, err
	}
	var out []docCommand
	inFence, inShell := false, false
	var pending []string
	first := 0
	for i, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") {
			if !inFence {
				inFence = true
				info, _, _ := strings.Cut(strings.TrimSpace(strings.TrimPrefix(trimmed, "```")), " ")
				inShell = shellInfo[info]
				continue
			}
			if len(pending) > 0 {
				return nil, fmt.Errorf("%s:%d: the block ends in a continuation line", rel, i+1)
			}
			inFence, inShell = false, false
			continue
		}
		if !inShell {
			continue
		}
		code, err := stripComment(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", rel, i+1, err)
		}
		code = strings.TrimRight(code, " \t")
		if len(pending) == 0 {
			first = i + 1
		}
		cont := strings.HasSuffix(code, `\`)
		pending = append(pending, strings.TrimSuffix(code, `\`))
		if cont {
			continue
		}
		ws, err := splitWords(strings.Join(pending, " "))
		pending = pending[:0]
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", rel, first, err)
		}
		if len(ws) == 0 {
			continue
		}
		raws := make([]string, len(ws))
		for j, w := range ws {
			raws[j] = w.raw
		}
		out = append(out, docCommand{file: rel, line: first, text: strings.Join(raws, " ")})
	}
	if inFence {
		return nil, fmt.Errorf("%s: a fenced block is not closed", rel)
	}
	return out, nil
}

// stripComment removes a shell comment: # at the start of a word, outside
// quotes.
func stripComment(line string) (string, error) {
	var quote rune
	prev := ' '
	for i, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && (prev == ' ' || prev == '\t'):
			return line[:i], nil
		}
		prev = r
	}
	if quote != 0 {
		return "", fmt.Errorf("unterminated %c quote", quote)
	}
	return line, nil
}

// word is a shell word as written (raw) and as the shell passes it (val);
// op is an unquoted |, &, ; or && / ||.
type word struct {
	raw, val string
	op       bool
}

// splitWords splits a command line the way sh does for what the docs use:
// blanks separate words; '...' quotes literally; "..." quotes with \" and
// \\ escapes; a backslash outside quotes escapes the next character; |, &
// and ; outside quotes are operators. It does no expansion.
func splitWords(s string) ([]word, error) {
	var out []word
	var raw, val strings.Builder
	inWord := false
	flush := func() {
		if inWord {
			out = append(out, word{raw: raw.String(), val: val.String()})
		}
		raw.Reset()
		val.Reset()
		inWord = false
	}
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case r == ' ' || r == '\t':
			flush()
		case r == '|' || r == '&' || r == ';':
			flush()
			op := string(r)
			if i+1 < len(rs) && rs[i+1] == r && r != ';' {
				op += string(r)
				i++
			}
			out = append(out, word{raw: op, val: op, op: true})
		case r == '\'':
			j := i + 1
			for j < len(rs) && rs[j] != '\'' {
				j++
			}
			if j == len(rs) {
				return nil, fmt.Errorf("unterminated ' quote in %q", s)
			}
			raw.WriteString(string(rs[i : j+1]))
			val.WriteString(string(rs[i+1 : j]))
			inWord, i = true, j
		case r == '"':
			raw.WriteRune(r)
			j := i + 1
			for ; j < len(rs) && rs[j] != '"'; j++ {
				raw.WriteRune(rs[j])
				if rs[j] == '\\' && j+1 < len(rs) && (rs[j+1] == '"' || rs[j+1] == '\\') {
					j++
					raw.WriteRune(rs[j])
				}
				val.WriteRune(rs[j])
			}
			if j == len(rs) {
				return nil, fmt.Errorf("unterminated \" quote in %q", s)
			}
			raw.WriteRune('"')
			inWord, i = true, j
		case r == '\\' && i+1 < len(rs):
			raw.WriteRune(r)
			raw.WriteRune(rs[i+1])
			val.WriteRune(rs[i+1])
			inWord, i = true, i+1
		default:
			raw.WriteRune(r)
			val.WriteRune(r)
			inWord = true
		}
	}
	flush()
	return out, nil
}

// values are the words as the shell passes them.
func values(ws []word) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.val
	}
	return out
}

func TestReadCommands(t *testing.T) {
	dir := t.TempDir()
	md := "# T\n\n```sh\n" +
		"echo one   two # a comment\n" +
		"./processor run --a 1 \\\n    --b 2 &\n" +
		"# only a comment\n\n" +
		"grep -E '^weir_(a|b) # no comment' x | wc -l\n" +
		"```\n\n```go\nfunc main() {}\n```\n\n```\nnot a command\n```\n"
	if err := os.WriteFile(filepath.Join(dir, "t.md"), []byte(md), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := readCommands(dir, "t.md")
	if err != nil {
		t.Fatal(err)
	}
	want := []docCommand{
		{"t.md", 4, "echo one two"},
		{"t.md", 5, "./processor run --a 1 --b 2 &"},
		{"t.md", 9, "grep -E '^weir_(a|b) # no comment' x | wc -l"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("readCommands:\n got %v\nwant %v", got, want)
	}
	ws, err := splitWords(got[2].text)
	if err != nil {
		t.Fatal(err)
	}
	if v := values(ws); fmt.Sprintf("%q", v) != `["grep" "-E" "^weir_(a|b) # no comment" "x" "|" "wc" "-l"]` || !ws[4].op {
		t.Errorf("splitWords: %q", v)
	}
	for _, bad := range []string{"```sh\necho 'open\n```\n", "```sh\necho a \\\n```\n", "```sh\necho\n"} {
		if err := os.WriteFile(filepath.Join(dir, "bad.md"), []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := readCommands(dir, "bad.md"); err == nil {
			t.Errorf("readCommands(%q): no error", bad)
		}
	}
}
