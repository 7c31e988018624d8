package healthcheck

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"syscall"
	"testing"
	"time"
)

// BenchmarkHTTPProbeKeptConnection is one HTTP probe on a kept connection
// to a minimal server in this process; cpu-ns/op is the process's CPU time
// (getrusage) per probe, the server's included:
//
//	go test -run '^$' -bench HTTPProbeKeptConnection -benchtime 20000x ./healthcheck/
func BenchmarkHTTPProbeKeptConnection(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		resp := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nok\n")
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				return
			}
			if bytes.Equal(line, []byte("\r\n")) {
				if _, err := c.Write(resp); err != nil {
					return
				}
			}
		}
	}()
	p := newProbers(Options{})
	h := &HTTPConfig{Path: "/health", ExpectedStatuses: DefaultExpectedStatuses}
	addr := ln.Addr().String()
	ctx := context.Background()
	var conn *httpConn
	b.ReportAllocs()
	var ru0, ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	for b.Loop() {
		conn, err = benchProbeHTTP(ctx, p, addr, h, conn)
		if err != nil || conn == nil {
			b.Fatalf("probe: %v (connection kept: %v)", err, conn != nil)
		}
	}
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
	conn.Close()
}

func benchProbeHTTP(ctx context.Context, p *probers, addr string, h *HTTPConfig, conn *httpConn) (*httpConn, error) {
	return p.probeHTTP(ctx, time.Now().Add(time.Second), addr, h, true, conn)
}
