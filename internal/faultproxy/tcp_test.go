package faultproxy

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"
)

// echo serves line echo at a 127.0.0.1 port until the test ends.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

type lineConn struct {
	net.Conn
	r     *bufio.Reader
	lines chan string
}

func dial(t *testing.T, addr string) *lineConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	lc := &lineConn{Conn: c, r: bufio.NewReader(c), lines: make(chan string, 16)}
	go func() {
		defer close(lc.lines)
		for {
			l, err := lc.r.ReadString('\n')
			if err != nil {
				return
			}
			lc.lines <- l
		}
	}()
	return lc
}

func (c *lineConn) send(t *testing.T, s string) {
	t.Helper()
	if _, err := io.WriteString(c, s+"\n"); err != nil {
		t.Fatal(err)
	}
}

// expect waits up to d for the echo of s; got is false if none came.
func (c *lineConn) expect(t *testing.T, s string, d time.Duration) (got bool) {
	t.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok {
			t.Fatalf("connection closed waiting for %q", s)
		}
		if l != s+"\n" {
			t.Fatalf("got %q, want %q", l, s)
		}
		return true
	case <-time.After(d):
		return false
	}
}

func TestTCPCutHoldsBytesUntilTheHeal(t *testing.T) {
	p, err := ListenTCP("127.0.0.1:0", echo(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	open := dial(t, p.Addr)
	open.send(t, "before")
	if !open.expect(t, "before", 5*time.Second) {
		t.Fatal("no echo through a clean link")
	}

	p.Cut(true)
	open.send(t, "during")
	fresh := dial(t, p.Addr) // connects (the kernel accepts), then silence
	fresh.send(t, "fresh")
	if open.expect(t, "during", 300*time.Millisecond) || fresh.expect(t, "fresh", 10*time.Millisecond) {
		t.Fatal("bytes crossed a cut link")
	}
	p.Cut(false)
	if !open.expect(t, "during", 5*time.Second) {
		t.Fatal("what was sent during the cut was not delivered after the heal")
	}
	if !fresh.expect(t, "fresh", 5*time.Second) {
		t.Fatal("a connection made during the cut did not reach the target after the heal")
	}
}

func TestTCPSlowAndLossyLink(t *testing.T) {
	p, err := ListenTCP("127.0.0.1:0", echo(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c := dial(t, p.Addr)
	p.Link(100*time.Millisecond, 0)
	start := time.Now()
	c.send(t, "slow")
	if !c.expect(t, "slow", 5*time.Second) {
		t.Fatal("no echo through a slow link")
	}
	if rtt := time.Since(start); rtt < 200*time.Millisecond {
		t.Fatalf("round trip %v through a link of 100 ms each way", rtt)
	}
	// A burst is not held to one chunk per latency: chunks queue.
	start = time.Now()
	for range 20 {
		c.send(t, "burst")
		time.Sleep(5 * time.Millisecond)
	}
	for range 20 {
		if !c.expect(t, "burst", 5*time.Second) {
			t.Fatal("burst lost")
		}
	}
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Fatalf("20 chunks 5 ms apart took %v through a 100 ms link: the latency throttles the rate", took)
	}

	p.Link(0, 1) // every chunk stalls 200 ms to 2 s
	start = time.Now()
	c.send(t, "lossy")
	if !c.expect(t, "lossy", 10*time.Second) {
		t.Fatal("no echo through a lossy link")
	}
	if took := time.Since(start); took < 400*time.Millisecond {
		t.Fatalf("round trip %v where both chunks stall 200 ms or more", took)
	}
	p.Link(0, 0)
	start = time.Now()
	c.send(t, "clean")
	if !c.expect(t, "clean", 5*time.Second) || time.Since(start) > time.Second {
		t.Fatal("the link stayed slow after Link(0, 0)")
	}
}

func TestTCPCloseEndsConnections(t *testing.T) {
	p, err := ListenTCP("127.0.0.1:0", echo(t), 3)
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, p.Addr)
	c.send(t, "x")
	c.expect(t, "x", 5*time.Second)
	p.Cut(true)
	done := make(chan struct{})
	go func() { p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hung on a cut link")
	}
	select {
	case _, ok := <-c.lines:
		if ok {
			t.Fatal("data after Close")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the client's connection stayed open after Close")
	}
}
