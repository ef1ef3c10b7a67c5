// Package faultproxy is an HTTP reverse proxy on 127.0.0.1 that injects
// faults between a client and a server, for tests of retries and of what a
// client leaves behind when requests fail: 500 responses, connections reset
// before or after the server handled the request, response bodies cut
// short, delays, and stalls that only the client's timeout ends.
//
// Faults are drawn from a seeded random source in the order requests
// arrive, so a client that sends one request at a time sees the same faults
// for the same seed. A Decide function scripts them instead.
package faultproxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// Fault is what the proxy does to one request.
type Fault int

const (
	// Pass forwards the request and its response.
	Pass Fault = iota
	// Error500 answers 500 InternalError without forwarding.
	Error500
	// Reset resets the connection without forwarding: the server never
	// sees the request.
	Reset
	// ResetAfter forwards the request, then resets the connection instead
	// of answering: the server did the work, the client cannot know.
	ResetAfter
	// Truncate forwards the request and answers with the full headers but
	// only half the body, then closes the connection.
	Truncate
	// Delay waits Options.Delay, then forwards.
	Delay
	// Stall holds the request without forwarding until the client gives up.
	Stall
	numFaults
)

var faultNames = [...]string{"pass", "500", "reset", "reset-after", "truncate", "delay", "stall"}

func (f Fault) String() string {
	if f >= 0 && f < numFaults {
		return faultNames[f]
	}
	return fmt.Sprintf("Fault(%d)", int(f))
}

// Options configures a proxy. Rates are probabilities per request; their
// sum must not exceed 1.
type Options struct {
	Seed       uint64
	Error500   float64
	Reset      float64
	ResetAfter float64
	Truncate   float64
	Delay      float64
	Stall      float64
	// DelayFor is how long Delay waits; 0: 20ms.
	DelayFor time.Duration
	// Decide, if set, replaces the random draw: n counts requests from 0.
	Decide func(r *http.Request, n int) Fault
}

// Proxy is a running fault proxy.
type Proxy struct {
	// URL is the proxy's base URL, to use as the client's endpoint.
	URL string

	srv      *httptest.Server
	upstream *url.URL
	tr       *http.Transport
	opts     Options

	mu     sync.Mutex
	rng    *rand.Rand
	n      int
	counts [numFaults]int
	on     bool
}

// Start runs a proxy in front of upstream (a base URL such as
// http://127.0.0.1:9000). Faults are off until Enable.
func Start(upstream string, opts Options) (*Proxy, error) {
	u, err := url.Parse(upstream)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: upstream %q: %w", upstream, err)
	}
	sum := opts.Error500 + opts.Reset + opts.ResetAfter + opts.Truncate + opts.Delay + opts.Stall
	if sum > 1 {
		return nil, fmt.Errorf("faultproxy: fault rates add up to %g, over 1", sum)
	}
	if opts.DelayFor <= 0 {
		opts.DelayFor = 20 * time.Millisecond
	}
	p := &Proxy{
		upstream: u,
		tr:       &http.Transport{MaxIdleConnsPerHost: 16},
		opts:     opts,
		rng:      rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15)),
	}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	p.URL = p.srv.URL
	return p, nil
}

// Enable turns fault injection on or off (requests pass while off).
func (p *Proxy) Enable(on bool) {
	p.mu.Lock()
	p.on = on
	p.mu.Unlock()
}

// Counts returns how often each fault was injected, Pass included.
func (p *Proxy) Counts() map[Fault]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := make(map[Fault]int)
	for f, c := range p.counts {
		if c > 0 {
			m[Fault(f)] = c
		}
	}
	return m
}

// Close stops the proxy; stalled requests end.
func (p *Proxy) Close() {
	p.srv.CloseClientConnections()
	p.srv.Close()
	p.tr.CloseIdleConnections()
}

func (p *Proxy) decide(r *http.Request) Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.n
	p.n++
	f := Pass
	switch {
	case !p.on:
	case p.opts.Decide != nil:
		f = p.opts.Decide(r, n)
	default:
		x := p.rng.Float64()
		for _, c := range []struct {
			rate  float64
			fault Fault
		}{
			{p.opts.Error500, Error500},
			{p.opts.Reset, Reset},
			{p.opts.ResetAfter, ResetAfter},
			{p.opts.Truncate, Truncate},
			{p.opts.Delay, Delay},
			{p.opts.Stall, Stall},
		} {
			if x < c.rate {
				f = c.fault
				break
			}
			x -= c.rate
		}
	}
	p.counts[f]++
	return f
}

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	// Read the whole request first: a fault then never depends on how far
	// the client got with its body.
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // client went away
	}
	switch f := p.decide(r); f {
	case Error500:
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusInternalServerError)
		if r.Method != http.MethodHead {
			io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?>`+
				`<Error><Code>InternalError</Code><Message>faultproxy: injected 500</Message></Error>`)
		}
	case Reset:
		reset(w)
	case Stall:
		<-r.Context().Done()
	case Delay:
		t := time.NewTimer(p.opts.DelayFor)
		defer t.Stop()
		select {
		case <-r.Context().Done():
			return
		case <-t.C:
		}
		p.forward(w, r, body, Pass)
	default:
		p.forward(w, r, body, f)
	}
}

func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, body []byte, f Fault) {
	target := *p.upstream
	target.Path, target.RawPath, target.RawQuery = r.URL.Path, r.URL.RawPath, r.URL.RawQuery
	out, err := http.NewRequestWithContext(r.Context(), r.Method, target.String(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	out.Header = r.Header.Clone()
	out.Host = r.Host // signatures cover the Host the client saw
	out.ContentLength = int64(len(body))
	resp, err := p.tr.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	respBody, err := io.ReadAll(resp.Body)
	if err != nil {
		reset(w)
		return
	}
	switch {
	case f == ResetAfter, f == Truncate && len(respBody) < 2:
		reset(w)
	case f == Truncate:
		truncate(w, resp, respBody[:len(respBody)/2], len(respBody))
	default:
		for k, vs := range resp.Header {
			w.Header()[k] = vs
		}
		w.WriteHeader(resp.StatusCode)
		w.Write(respBody)
	}
}

// reset closes the client's connection with a TCP RST.
func reset(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	conn.Close()
}

// truncate writes resp's status and headers (with the full Content-Length)
// and part of its body, then closes the connection.
func truncate(w http.ResponseWriter, resp *http.Response, part []byte, full int) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	h := resp.Header.Clone()
	h.Del("Transfer-Encoding")
	h.Set("Content-Length", strconv.Itoa(full))
	bw := bufio.NewWriter(conn)
	fmt.Fprintf(bw, "HTTP/1.1 %s\r\n", resp.Status)
	h.Write(bw)
	io.WriteString(bw, "\r\n")
	bw.Write(part)
	bw.Flush()
}
