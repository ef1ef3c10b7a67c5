package status

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/checkpoint"
)

// TestCheckpointChart: a bar per recent checkpoint, scaled to the longest,
// on the chart's base; the size line through the middle of each slot.
func TestCheckpointChart(t *testing.T) {
	ms := time.Millisecond
	rows := func(durations ...time.Duration) []Checkpoint {
		var rs []Checkpoint
		for i, d := range durations {
			rs = append(rs, Checkpoint{ID: checkpoint.ID(i + 1), Duration: d, Size: int64(i) * 100})
		}
		return rs
	}
	for _, tc := range []struct {
		name    string
		rows    []Checkpoint
		heights []int
		line    string
	}{
		{"none", nil, nil, ""},
		{"one", rows(5 * ms), []int{chartHeight}, "177,33"},
		{"scaled to the longest", rows(10*ms, 20*ms, 40*ms), []int{9, 18, 36}, "165,33 171,18 177,3"},
		{"a bar for the shortest", rows(0, 40*ms), []int{1, 36}, "171,33 177,3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCheckpointChart(tc.rows)
			if c == nil {
				if tc.heights != nil {
					t.Fatal("no chart")
				}
				return
			}
			var heights []int
			for i, b := range c.Bars {
				heights = append(heights, b.H)
				if b.Y+b.H != chartHeight || b.X < 0 || b.X+b.W > chartWidth {
					t.Errorf("bar %d at x %d..%d, y %d..%d: outside the %dx%d chart or off its base", i, b.X, b.X+b.W, b.Y, b.Y+b.H, chartWidth, chartHeight)
				}
			}
			if !equalInts(heights, tc.heights) || c.SizeLine != tc.line {
				t.Errorf("bars %v, size line %q; want %v, %q", heights, c.SizeLine, tc.heights, tc.line)
			}
		})
	}
	t.Run("only the recent ones", func(t *testing.T) {
		c := newCheckpointChart(make([]Checkpoint, RecentCheckpoints+5))
		if len(c.Bars) != RecentCheckpoints || c.Bars[0].X != 1 {
			t.Errorf("%d bars from x %d, want %d from the left edge", len(c.Bars), c.Bars[0].X, RecentCheckpoints)
		}
	})
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestFormats(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{formatDuration(0), "—"},
		{formatDuration(400 * time.Microsecond), "<1ms"},
		{formatDuration(35400 * time.Microsecond), "35ms"},
		{formatDuration(1234 * time.Millisecond), "1.23s"},
		{formatDuration(192600 * time.Millisecond), "3m13s"},
		{formatBytes(0), "0 B"},
		{formatBytes(1023), "1023 B"},
		{formatBytes(1536), "1.5 KiB"},
		{formatBytes(5 << 20), "5.0 MiB"},
		{formatBytes(3 << 40), "3.0 TiB"},
		{formatCount(999), "999"},
		{formatCount(1234567), "1,234,567"},
		{formatCount(-1234), "-1,234"},
		{formatTasks(nil), "none"},
		{formatTasks([]int{0, 2, 5}), "0, 2, 5"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

var taskRowTag = regexp.MustCompile(`<tr class="task" data-task="(\d+)" data-state="([a-z]+)">`)

// TestRender: the page lists each task in its state with its records, its
// last checkpoint and a chart of its recent ones, and the group's members
// with this worker marked; it escapes what it shows and loads nothing from
// elsewhere.
func TestRender(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	running := Task{ID: 0, State: Running, Epoch: 7, Since: now.Add(-time.Minute), RestoredFrom: 12, Restore: 40 * time.Millisecond}
	for i := range 5 {
		running.AddCheckpoint(Checkpoint{ID: checkpoint.ID(13 + i), Time: now.Add(time.Duration(i-5) * time.Second), Duration: 20 * time.Millisecond, Size: 1000 * int64(i+1)})
	}
	s := Worker{Job: "count", Name: "count-prod", Input: "numbers", Output: "counts", Group: "weir-count-prod", Assignment: "consumer group",
		Started: now.Add(-90 * time.Second), Now: now, ReadyWhy: "task 1 is restoring", Assigned: []int{0, 1, 2},
		Tasks: []Task{running, {ID: 1, State: Restoring, Epoch: 7, Since: now},
			{ID: 2, State: Failed, Epoch: 7, Since: now, Err: `sink: <script>alert("x")</script>`}},
		GroupState: &Group{State: "Stable", Generation: 3, Members: []Member{
			{ID: "m-1", Host: "a", HTTP: "a:9464", Tasks: []int{0, 1, 2}, Epoch: 7, Self: true},
			{ID: "m-2", Host: "b", HTTP: "b:9464", Tasks: []int{3}, Epoch: 7},
		}},
		RecordsIn: 1234567,
	}
	var b bytes.Buffer
	if err := Render(&b, s, func(task int) (int64, int64) { return int64(100 * task), int64(10 * task) }); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	states := map[string]string{}
	for _, m := range taskRowTag.FindAllStringSubmatch(page, -1) {
		states[m[1]] = m[2]
	}
	if want := map[string]string{"0": "running", "1": "restoring", "2": "failed"}; len(states) != 3 || states["0"] != want["0"] || states["1"] != want["1"] || states["2"] != want["2"] {
		t.Errorf("task rows %v, want %v", states, want)
	}
	row := tableRow(t, page, `data-task="0"`)
	for _, want := range []string{"checkpoint 12", "#17", "4.9 KiB", "<svg", "<polyline points="} {
		if !strings.Contains(row, want) {
			t.Errorf("task 0's row lacks %q:\n%s", want, row)
		}
	}
	if n := strings.Count(row, "<rect "); n != 5 {
		t.Errorf("task 0's chart has %d bars, want one per checkpoint (5)", n)
	}
	if row := tableRow(t, page, `data-task="2"`); !strings.Contains(row, "200 / 20") {
		t.Errorf("task 2's row lacks its records in and out (200 / 20):\n%s", row)
	}
	if row := tableRow(t, page, `data-task="1"`); !strings.Contains(row, "none yet") || strings.Contains(row, "<svg") {
		t.Errorf("task 1 (no checkpoint yet) shows one:\n%s", row)
	}
	for _, want := range []string{
		`error: sink: &lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;`,
		`not ready: task 1 is restoring`,
		`1,234,567`,
		`<tr class="member" data-member="m-1" data-http="a:9464" data-self="true">`,
		`<tr class="member" data-member="m-2" data-http="b:9464">`,
		`Stable, generation 3`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	for _, external := range []string{"<script", "<link", " src=", "url(", "@import"} {
		if strings.Contains(page, external) {
			t.Errorf("page contains %q: it must be self-contained", external)
		}
	}

	s.Group, s.GroupState = "", nil
	b.Reset()
	if err := Render(&b, s, nil); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), `id="members"`) {
		t.Errorf("a worker with static tasks shows group members")
	}
}

// tableRow returns the row of page that starts with the tag open, up to
// its </tr>.
func tableRow(t *testing.T, page, open string) string {
	t.Helper()
	i := strings.Index(page, open)
	if i < 0 {
		t.Fatalf("page has no %s", open)
	}
	row, _, ok := strings.Cut(page[i:], "</tr>")
	if !ok {
		t.Fatalf("row %s has no end", open)
	}
	return row
}

// TestAddCheckpoint: a task keeps its newest RecentCheckpoints, oldest
// first.
func TestAddCheckpoint(t *testing.T) {
	var task Task
	for i := range RecentCheckpoints + 7 {
		task.AddCheckpoint(Checkpoint{ID: checkpoint.ID(i + 1)})
	}
	if n := len(task.Checkpoints); n != RecentCheckpoints || task.Checkpoints[0].ID != 8 || task.Checkpoints[n-1].ID != RecentCheckpoints+7 {
		t.Errorf("%d checkpoints, %d..%d; want %d, 8..%d", n, task.Checkpoints[0].ID, task.Checkpoints[n-1].ID, RecentCheckpoints, RecentCheckpoints+7)
	}
}
