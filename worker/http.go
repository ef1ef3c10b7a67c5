package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/weirstream/weir/worker/internal/status"
)

// serveHTTP serves the status page (/ and /status.json), /metrics, /healthz,
// /readyz and Go's profiles (/debug/pprof/) on addr until stop. If addr is
// the default and taken (another worker on the host has it), it serves on
// any free port of 127.0.0.1.
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
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
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
		var page bytes.Buffer
		if err := status.Render(&page, w.status(r.Context()), w.stats.taskCounts); err != nil {
			log.Warn("status page", "err", err)
			http.Error(rw, "status page: "+err.Error(), http.StatusInternalServerError)
			return
		}
		rw.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = rw.Write(page.Bytes())
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
