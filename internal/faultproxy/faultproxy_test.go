package faultproxy

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestFaults(t *testing.T) {
	var served atomic.Int64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		b, _ := io.ReadAll(r.Body)
		io.WriteString(w, r.Method+" "+r.URL.RequestURI()+" "+r.Host+" "+string(b))
	}))
	defer upstream.Close()

	for _, tc := range []struct {
		fault      Fault
		wantStatus int    // 0: a transport error
		wantBody   string // prefix
		wantServed int64
	}{
		{Pass, 200, "PUT /a/b?x=1 ", 1},
		{Delay, 200, "PUT /a/b?x=1 ", 1},
		{Error500, 500, "<?xml", 0},
		{Reset, 0, "", 0},
		{ResetAfter, 0, "", 1},
		{Truncate, 200, "", 1}, // reading the body fails
		{Stall, 0, "", 0},
	} {
		t.Run(tc.fault.String(), func(t *testing.T) {
			p, err := Start(upstream.URL, Options{Decide: func(*http.Request, int) Fault { return tc.fault }, DelayFor: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			p.Enable(true)
			served.Store(0)
			client := &http.Client{Transport: &http.Transport{ResponseHeaderTimeout: 50 * time.Millisecond}}
			req, _ := http.NewRequest(http.MethodPut, p.URL+"/a/b?x=1", strings.NewReader("body"))
			resp, err := client.Do(req)
			if tc.wantStatus == 0 {
				if err == nil {
					resp.Body.Close()
					t.Fatalf("got status %d, want a transport error", resp.StatusCode)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				body, rerr := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != tc.wantStatus {
					t.Fatalf("status %d, want %d", resp.StatusCode, tc.wantStatus)
				}
				if tc.fault == Truncate {
					if !errors.Is(rerr, io.ErrUnexpectedEOF) {
						t.Fatalf("reading a cut body: %v (%q), want unexpected EOF", rerr, body)
					}
				} else if rerr != nil || !strings.HasPrefix(string(body), tc.wantBody) {
					t.Fatalf("body %q, %v; want it to start with %q", body, rerr, tc.wantBody)
				}
				if tc.fault == Pass && !strings.HasSuffix(string(body), strings.TrimPrefix(p.URL, "http://")+" body") {
					t.Fatalf("upstream saw %q: want the client's Host and the body", body)
				}
			}
			if got := served.Load(); got != tc.wantServed {
				t.Fatalf("upstream served %d requests, want %d", got, tc.wantServed)
			}
			if c := p.Counts()[tc.fault]; c != 1 {
				t.Fatalf("counts %v", p.Counts())
			}
		})
	}
}

func TestSeededDraws(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer upstream.Close()
	draw := func(seed uint64) map[Fault]int {
		p, err := Start(upstream.URL, Options{Seed: seed, Error500: 0.3, Delay: 0.2, DelayFor: time.Microsecond})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		p.Enable(true)
		for range 200 {
			resp, err := http.Get(p.URL + "/")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		return p.Counts()
	}
	a, b := draw(7), draw(7)
	if a[Error500] != b[Error500] || a[Delay] != b[Delay] {
		t.Fatalf("same seed, different faults: %v and %v", a, b)
	}
	if a[Error500] < 30 || a[Error500] > 90 || a[Delay] < 15 || a[Delay] > 65 || a[Pass]+a[Error500]+a[Delay] != 200 {
		t.Fatalf("counts %v: not near the rates 0.3 and 0.2 of 200", a)
	}
	if _, err := Start(upstream.URL, Options{Error500: 0.6, Reset: 0.6}); err == nil {
		t.Fatal("rates adding up to 1.2 accepted")
	}
}
