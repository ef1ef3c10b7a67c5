package worker

import (
	"context"
	"encoding/json"
	"errors"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// serveHTTP serves the status page (/ and /status.json), /metrics, /healthz
// and /readyz on addr until stop. If addr is the default and taken (another
// worker on the host has it), it serves on any free port of 127.0.0.1.
func serveHTTP(ctx context.Context, addr string, fallback bool, g prometheus.Gatherer, w *worker, log *slog.Logger) (string, func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil && fallback && errors.Is(err, syscall.EADDRINUSE) {
		log.Warn("the default status address is taken (another worker on this host?): using any free port", "addr", addr)
		ln, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		return "", nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(rw http.ResponseWriter, _ *http.Request) { _, _ = rw.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(rw http.ResponseWriter, _ *http.Request) {
		ok, why := w.ready()
		if !ok {
			rw.WriteHeader(http.StatusServiceUnavailable)
		}
		_, _ = rw.Write([]byte(why + "\n"))
	})
	mux.HandleFunc("/status.json", func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(rw)
		enc.SetIndent("", "  ")
		_ = enc.Encode(w.status(r.Context()))
	})
	mux.HandleFunc("/{$}", func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "text/html; charset=utf-8")
		if err := statusPage.Execute(rw, w.status(r.Context())); err != nil {
			log.Debug("status page", "err", err)
		}
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server", "err", err)
		}
	}()
	stop := func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-done
	}
	return ln.Addr().String(), stop, nil
}

// workerStatus is what the status page shows.
type workerStatus struct {
	Job        string       `json:"job"`
	Name       string       `json:"name"`
	Input      string       `json:"input"`
	Output     string       `json:"output"`
	Group      string       `json:"group,omitempty"`
	Assignment string       `json:"assignment"`
	Started    time.Time    `json:"started"`
	Now        time.Time    `json:"now"`
	Ready      bool         `json:"ready"`
	ReadyWhy   string       `json:"ready_why"`
	Assigned   []int        `json:"assigned"`
	Tasks      []taskStatus `json:"tasks"`
	GroupState *groupState  `json:"group_state,omitempty"`
	GroupErr   string       `json:"group_error,omitempty"`
	RecordsIn  int64        `json:"records_in"`
	RecordsOut int64        `json:"records_out"`
}

func (w *worker) status(ctx context.Context) workerStatus {
	c := &w.cfg
	s := workerStatus{Job: c.Job, Name: c.name(), Input: c.Input, Output: c.Output, Started: w.started, Now: time.Now(),
		Tasks: w.taskSnapshot(), RecordsIn: w.stats.In.Load(), RecordsOut: w.stats.Out.Load(), Assignment: "static (--tasks)", Assigned: c.Tasks}
	s.Ready, s.ReadyWhy = w.ready()
	if g := w.group; g != nil {
		s.Group, s.Assignment, s.Assigned = c.Group(), "consumer group", g.assignedTasks()
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		gs, err := g.describe(dctx)
		cancel()
		if err != nil {
			s.GroupErr = err.Error()
		} else {
			s.GroupState = &gs
		}
	}
	return s
}

var statusPage = template.Must(template.New("status").Funcs(template.FuncMap{
	"ms": func(d time.Duration) string { return d.Round(time.Millisecond).String() },
	"ago": func(now, t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return now.Sub(t).Round(time.Second).String() + " ago"
	},
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>weir · {{.Name}}</title></head>
<body>
<h1>{{.Name}}</h1>
<p>job {{.Job}}: {{.Input}} → {{.Output}}; tasks by {{.Assignment}}{{if .Group}} <code>{{.Group}}</code>{{end}}; ready: {{.Ready}} ({{.ReadyWhy}})</p>
<h2>Tasks of this worker</h2>
<table id="tasks">
<tr><th>task</th><th>state</th><th>epoch</th><th>restored from</th><th>restore</th><th>first record</th><th>last checkpoint</th></tr>
{{range .Tasks}}<tr class="task" data-task="{{.Task}}"><td>{{.Task}}</td><td>{{.State}}</td><td>{{.Epoch}}</td><td>{{.RestoredFrom}}</td><td>{{ms .Restore}}</td><td>{{ms .FirstRecord}}</td><td>{{with $n := len .Checkpoints}}{{end}}</td></tr>
{{end}}</table>
{{with .GroupState}}<h2>Members of the group</h2>
<table id="members">
<tr><th>member</th><th>host</th><th>status page</th><th>tasks</th><th>epoch</th></tr>
{{range .Members}}<tr class="member"><td>{{.ID}}{{if .Self}} (this worker){{end}}</td><td>{{.Host}}</td><td>{{.HTTP}}</td><td>{{.Tasks}}</td><td>{{.Epoch}}</td></tr>
{{end}}</table>{{end}}
</body></html>
`))
