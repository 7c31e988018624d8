package healthcheck

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"
)

// FuzzHTTPResponse feeds a backend's answer to an HTTP probe: whatever the
// bytes, the probe ends without panicking, and keeps the connection only
// after a complete, well-framed answer that leaves nothing unread.
func FuzzHTTPResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n",
		"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nok\n\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nbody until the end",
		"HTTP/1.0 200 OK\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n",
		"garbage\r\n\r\n",
		"HTTP/1.1 99999 X\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	h := &HTTPConfig{Path: "/health", ExpectedStatuses: DefaultExpectedStatuses}
	f.Fuzz(func(t *testing.T, answer []byte) {
		client := &answerConn{r: bytes.NewReader(answer)}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		keep, answered, err := roundTrip(ctx, client, "127.0.0.1:80", h, true)
		if keep && (!answered || !bytes.HasPrefix(answer, []byte("HTTP/1."))) {
			t.Fatalf("kept the connection after %q (answered %v, err %v)", answer, answered, err)
		}
	})
}

// answerConn is a connection that discards what is written and reads a
// fixed answer, then EOF.
type answerConn struct {
	net.Conn // not called
	r        *bytes.Reader
}

func (c *answerConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *answerConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *answerConn) SetDeadline(time.Time) error      { return nil }
func (c *answerConn) SetReadDeadline(time.Time) error  { return nil }
func (c *answerConn) SetWriteDeadline(time.Time) error { return nil }
