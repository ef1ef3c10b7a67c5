package status

import (
	"html/template"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// view is what the page renders: the worker's status and what only the
// page shows.
type view struct {
	Worker
	Uptime time.Duration
	Rows   []taskRow
}

// taskRow is one task of the page's task table.
type taskRow struct {
	Task
	In, Out int64
	// Last is the newest completed checkpoint (nil: none yet), completed
	// LastAge ago.
	Last    *Checkpoint
	LastAge time.Duration
	Chart   *checkpointChart
}

// Render writes the page of s to w. counts, if not nil, says how many
// records each task read and wrote.
func Render(w io.Writer, s Worker, counts func(task int) (in, out int64)) error {
	return page.Execute(w, newView(s, counts))
}

// newView adds to s what only the page shows.
func newView(s Worker, counts func(task int) (in, out int64)) view {
	v := view{Worker: s, Uptime: s.Now.Sub(s.Started)}
	for _, t := range s.Tasks {
		r := taskRow{Task: t, Chart: newCheckpointChart(t.Checkpoints)}
		if counts != nil {
			r.In, r.Out = counts(t.ID)
		}
		if n := len(t.Checkpoints); n > 0 {
			r.Last = &t.Checkpoints[n-1]
			r.LastAge = s.Now.Sub(r.Last.Time.Add(r.Last.Duration)) // Time is the trigger
		}
		v.Rows = append(v.Rows, r)
	}
	return v
}

// checkpointChart draws a task's recent checkpoints, newest on the right:
// a bar per checkpoint for its duration and a line for its state size,
// each scaled to the largest shown.
type checkpointChart struct {
	Width, Height int
	Bars          []chartBar
	SizeLine      string // polyline points
	MaxDuration   time.Duration
	MaxSize       int64
}

type chartBar struct {
	X, Y, W, H int
	Title      string
}

const (
	chartSlot   = 6 // pixels per checkpoint
	chartWidth  = chartSlot * RecentCheckpoints
	chartHeight = 36
	chartMargin = 3 // keeps the size line's stroke inside
)

func newCheckpointChart(rows []Checkpoint) *checkpointChart {
	if len(rows) == 0 {
		return nil
	}
	rows = rows[max(0, len(rows)-RecentCheckpoints):]
	c := &checkpointChart{Width: chartWidth, Height: chartHeight}
	for _, r := range rows {
		c.MaxDuration, c.MaxSize = max(c.MaxDuration, r.Duration), max(c.MaxSize, r.Size)
	}
	var line []byte
	for i, r := range rows {
		x := chartWidth - (len(rows)-i)*chartSlot
		h := max(1, scaled(int64(r.Duration), int64(c.MaxDuration), chartHeight))
		c.Bars = append(c.Bars, chartBar{X: x + 1, Y: chartHeight - h, W: chartSlot - 2, H: h,
			Title: "checkpoint " + strconv.FormatInt(int64(r.ID), 10) + ": " + formatDuration(r.Duration) + ", " + formatBytes(r.Size)})
		y := chartHeight - chartMargin - scaled(r.Size, c.MaxSize, chartHeight-2*chartMargin)
		if i > 0 {
			line = append(line, ' ')
		}
		line = strconv.AppendInt(line, int64(x+chartSlot/2), 10)
		line = append(line, ',')
		line = strconv.AppendInt(line, int64(y), 10)
	}
	c.SizeLine = string(line)
	return c
}

// scaled is v of most in pixels.
func scaled(v, most int64, pixels int) int {
	if most <= 0 {
		return 0
	}
	return int(math.Round(float64(v) / float64(most) * float64(pixels)))
}

// formatDuration is d for people: milliseconds below a second, then
// seconds to the hundredth, then whole seconds; "—" for none.
func formatDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "—"
	case d < time.Millisecond:
		return "<1ms"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// formatUptime is d to the second (to the millisecond below one).
func formatUptime(d time.Duration) string {
	if d < time.Second {
		return formatDuration(d)
	}
	return d.Round(time.Second).String()
}

func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	f, suffix := float64(n)/unit, "KiB"
	for _, s := range []string{"MiB", "GiB", "TiB"} {
		if f < unit {
			break
		}
		f, suffix = f/unit, s
	}
	return strconv.FormatFloat(f, 'f', 1, 64) + " " + suffix
}

// formatCount is n with thousands separated.
func formatCount(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func formatTasks(ts []int) string {
	if len(ts) == 0 {
		return "none"
	}
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = strconv.Itoa(t)
	}
	return strings.Join(s, ", ")
}

// page is the status page: server-rendered, self-contained (inline CSS
// and SVG, no script), reloading itself every 5 seconds.
var page = template.Must(template.New("status").Funcs(template.FuncMap{
	"dur":    formatDuration,
	"bytes":  formatBytes,
	"count":  formatCount,
	"tasks":  formatTasks,
	"uptime": formatUptime,
	"since":  func(now, t time.Time) string { return formatUptime(now.Sub(t)) },
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="5">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>weir · {{.Name}}</title>
<style>
:root{--fg:#1f2328;--muted:#656d76;--line:#d0d7de;--soft:#eaeef2;--bg:#f6f8fa;--ok:#1a7f37;--warn:#9a6700;--bad:#cf222e;--dur:#80ccff;--size:#bc4c00;--self:#ddf4ff}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;color:var(--fg);background:#fff}
header{padding:14px 28px 12px;background:var(--bg);border-bottom:1px solid var(--line)}
header .title{display:flex;align-items:center;gap:14px;flex-wrap:wrap}
header h1{margin:0;font-size:20px;overflow-wrap:anywhere}
header p{margin:6px 0 0;color:var(--muted)}
header p b,header p code{color:var(--fg)}
.brand{color:var(--muted);font-weight:600;letter-spacing:.03em}
main{padding:4px 28px 8px}
h2{margin:24px 0 8px;font-size:15px}
h2 .note{color:var(--muted);font-weight:400;font-size:13px;margin-left:6px}
code,.mono{font-family:ui-monospace,SFMono-Regular,"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:12px}
.muted,.sub{color:var(--muted)}
.sub{display:block;font-size:12px}
.pill{display:inline-block;padding:1px 10px;border:1px solid currentColor;border-radius:999px;font-size:12px;font-weight:600}
.ok{color:var(--ok)}.warn{color:var(--warn)}.bad{color:var(--bad)}
dl#worker{display:grid;grid-template-columns:repeat(auto-fit,minmax(150px,1fr));gap:1px;margin:18px 0 0;background:var(--line);border:1px solid var(--line);border-radius:6px;overflow:hidden}
dl#worker div{padding:8px 14px;background:#fff}
dt{color:var(--muted);font-size:11px;letter-spacing:.05em;text-transform:uppercase}
dd{margin:2px 0 0;font-weight:500;overflow-wrap:anywhere}
table{width:100%;border-collapse:collapse;font-size:13px}
th{padding:6px 10px;border-bottom:1px solid var(--line);color:var(--muted);font-size:11px;font-weight:600;letter-spacing:.04em;text-align:left;text-transform:uppercase;white-space:nowrap}
td{padding:7px 10px;border-bottom:1px solid var(--soft);vertical-align:top}
.num{text-align:right;font-variant-numeric:tabular-nums}
.state{font-weight:600}
.state-running{color:var(--ok)}.state-restoring{color:var(--warn)}.state-failed,.state-superseded{color:var(--bad)}.state-stopping,.state-stopped{color:var(--muted)}
tr.task:has(+ tr.task-error) td{border-bottom:0}
tr.task-error td{padding-top:0;color:var(--bad);font-size:12px;overflow-wrap:anywhere}
tr[data-self] td{background:var(--self)}
.self{margin-left:6px;color:#0969da}
svg.chart{display:block}
svg.chart rect{fill:var(--dur)}
svg.chart polyline{fill:none;stroke:var(--size);stroke-width:1.5;stroke-linejoin:round}
svg.chart line{stroke:var(--line)}
.key{display:inline-block;width:9px;height:9px;margin:0 3px 0 0;border-radius:2px;vertical-align:-1px}
.key-dur{background:var(--dur)}.key-size{height:2px;vertical-align:2px;margin-left:8px;background:var(--size)}
th .legend{margin-left:8px;font-weight:400;text-transform:none;letter-spacing:0}
p.error{color:var(--bad)}
section.stopped{margin:18px 0 0;padding:2px 16px 8px;border:1px solid var(--bad);border-radius:6px;color:var(--bad);overflow-wrap:anywhere}
section.stopped h2{margin-top:10px}
footer{padding:16px 28px 24px;color:var(--muted);font-size:12px}
a{color:#0969da}
</style></head>
<body>
<header>
<div class="title"><span class="brand">weir worker</span><h1>{{.Name}}</h1>
{{if .Ready}}<span id="ready" class="pill ok">ready</span>{{else if .Stopped}}<span id="ready" class="pill bad">stopped: {{.StoppedReason}}</span>{{else}}<span id="ready" class="pill warn">not ready: {{.ReadyWhy}}</span>{{end}}</div>
<p>job <b>{{.Job}}</b> · <code>{{.Input}}</code> → <code>{{.Output}}</code> · tasks by {{.Assignment}}{{with .Group}} <code>{{.}}</code>{{end}}</p>
</header>
<main>
{{if .Stopped}}<section id="stopped" class="stopped" data-reason="{{.StoppedReason}}"><h2>Job stopped on this worker <span class="note">{{.StoppedReason}}, for {{since .Now .StoppedSince}}</span></h2>
<p>{{.Stopped}}</p></section>
{{end}}<dl id="worker">
<div><dt>assigned tasks</dt><dd>{{tasks .Assigned}}</dd></div>
<div><dt>records in</dt><dd>{{count .RecordsIn}}</dd></div>
<div><dt>records out</dt><dd>{{count .RecordsOut}}</dd></div>
<div><dt>uptime</dt><dd>{{uptime .Uptime}}</dd></div>
<div><dt>started</dt><dd>{{.Started.Format "2006-01-02 15:04:05 MST"}}</dd></div>
</dl>

<h2>Tasks of this worker</h2>
{{if .Rows}}<table id="tasks">
<thead><tr><th class="num">task</th><th>state</th><th>epoch</th><th>restored from</th><th class="num">restore</th><th class="num">first record</th><th class="num">records in / out</th><th>last checkpoint</th><th>recent checkpoints<span class="legend"><span class="key key-dur"></span>duration <span class="key key-size"></span>size</span></th></tr></thead>
<tbody>
{{range .Rows}}<tr class="task" data-task="{{.ID}}" data-state="{{.State}}">
<td class="num">{{.ID}}</td>
<td><span class="state state-{{.State}}">{{.State}}</span><span class="sub">for {{since $.Now .Since}}</span></td>
<td class="mono">{{.Epoch}}</td>
<td>{{if not .Restore}}<span class="muted">—</span>{{else if .RestoredFrom}}checkpoint {{.RestoredFrom}}{{else}}<span class="muted">fresh start</span>{{end}}</td>
<td class="num">{{dur .Restore}}</td>
<td class="num">{{dur .FirstRecord}}</td>
<td class="num">{{count .In}} / {{count .Out}}</td>
<td>{{if .Last}}<b>#{{.Last.ID}}</b> <span class="muted">{{dur .LastAge}} ago</span><span class="sub">took {{dur .Last.Duration}} · {{bytes .Last.Size}}</span>{{else}}<span class="muted">none yet</span>{{end}}</td>
<td>{{with .Chart}}<svg class="chart" width="{{.Width}}" height="{{.Height}}" viewBox="0 0 {{.Width}} {{.Height}}" role="img" aria-label="durations and sizes of the last {{len .Bars}} checkpoints">
<line x1="0" y1="{{.Height}}" x2="{{.Width}}" y2="{{.Height}}"/>
{{range .Bars}}<rect x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="{{.H}}"><title>{{.Title}}</title></rect>{{end}}
<polyline points="{{.SizeLine}}"/>
</svg><span class="sub">up to {{dur .MaxDuration}} · {{bytes .MaxSize}}</span>{{else}}<span class="muted">—</span>{{end}}</td>
</tr>
{{if .Err}}<tr class="task-error" data-task="{{.ID}}"><td></td><td colspan="8">error: {{.Err}}</td></tr>
{{end}}{{end}}</tbody></table>
{{else}}<p class="muted">No tasks yet.</p>
{{end}}
{{if .Group}}<h2>Members of the group <code>{{.Group}}</code>{{with .GroupState}}<span class="note">{{.State}}, generation {{.Generation}}</span>{{end}}</h2>
{{with .GroupState}}<table id="members">
<thead><tr><th>member</th><th>host</th><th>status page</th><th>tasks</th><th>epoch</th></tr></thead>
<tbody>
{{range .Members}}<tr class="member" data-member="{{.ID}}" data-http="{{.HTTP}}"{{if .Self}} data-self="true"{{end}}>
<td><code>{{.ID}}</code>{{if .Self}}<span class="pill self">this worker</span>{{end}}</td>
<td>{{.Host}}</td>
<td>{{with .HTTP}}<a href="http://{{.}}/">{{.}}</a>{{else}}<span class="muted">—</span>{{end}}</td>
<td>{{tasks .Tasks}}</td>
<td class="mono">{{.Epoch}}</td>
</tr>
{{end}}</tbody></table>
{{else}}{{if .GroupErr}}<p id="group-error" class="error">Cannot describe the group: {{.GroupErr}}</p>
{{else}}<p class="muted">Not in the group yet.</p>
{{end}}{{end}}{{end}}
</main>
<footer>Rendered {{.Now.Format "2006-01-02 15:04:05 MST"}}, reloads every 5 s · <a href="/status.json">status.json</a> · <a href="/metrics">metrics</a> · <a href="/readyz">readyz</a> · <a href="/healthz">healthz</a></footer>
</body></html>
`))
