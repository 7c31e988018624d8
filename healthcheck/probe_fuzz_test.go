package healthcheck

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
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
		"HTTP/1.1 000 \nTransfer-Encoding: chunked\n\n3 \n000\r\n00\n\n",
		"HTTP/1.1 100 \n\":\n\n",
		"HTTP/1.1 204 No Content\r\nX-Long: " + strings.Repeat("x", 5000) + "\r\n\r\n",
		"HTTP/1.1  200 OK\r\nContent-Length: 0000000000000000000000002\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 9223372036854775807\r\n\r\n",
		"HTTP/1.1 +99 OK\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	h := &HTTPConfig{Path: "/health", ExpectedStatuses: DefaultExpectedStatuses}
	f.Fuzz(func(t *testing.T, answer []byte) {
		client := &httpConn{Conn: &answerConn{r: bytes.NewReader(answer)}, req: httpRequest("127.0.0.1:80", h, true)}
		keep, answered, err := roundTrip(context.Background(), time.Now().Add(2*time.Second), client, h)
		if keep && (!answered || !bytes.HasPrefix(answer, []byte("HTTP/1."))) {
			t.Fatalf("kept the connection after %q (answered %v, err %v)", answer, answered, err)
		}
		// net/http reads the same status, and keeps the connection at
		// least whenever the probe does.
		status, refKeep, refErr := referenceResponse(answer)
		if answered && refErr == nil && (err == nil) != h.statusOK(status) {
			t.Errorf("%q: probe error %v, net/http status %d", answer, err, status)
		}
		if keep && !refKeep {
			t.Errorf("%q: the probe keeps the connection, net/http would not (error %v)", answer, refErr)
		}
		// And the probe reads every response net/http reads, but for
		// the deliberate differences.
		if refErr == nil && !answered && refusedOnPurpose(answer) == "" {
			t.Errorf("%q: net/http reads status %d, the probe refuses the response: %v", answer, status, err)
		}
	})
}

// refusedOnPurpose returns why the probe refuses answer where net/http
// reads it, or "" when it should not.
func refusedOnPurpose(answer []byte) string {
	line, _, _ := bytes.Cut(answer, []byte("\n"))
	_, code, _ := bytes.Cut(line, []byte(" "))
	code = bytes.TrimLeft(code, " ")
	headers := len(answer)
	for _, end := range []string{"\n\n", "\n\r\n"} {
		if i := bytes.Index(answer, []byte(end)); i >= 0 {
			headers = min(headers, i)
		}
	}
	switch {
	case !bytes.HasPrefix(line, []byte("HTTP/1.")):
		// net/http reads any HTTP/d.d status line.
		return "the answer to an HTTP/1.1 request in another major version is not framed as HTTP/1.x"
	case len(code) >= 3 && (code[0] == '+' || code[0] == '-'):
		// net/http reads the code with strconv.Atoi ("-00" is 0).
		return "a status code is three digits (RFC 9112 4); a signed one is below 100, in no expected range, so the probe fails either way"
	case headers >= maxHeaderBytes-2:
		// net/http's ReadResponse reads headers of any length.
		return "a probe reads at most 64 KiB of status line and headers"
	}
	return ""
}

// referenceResponse reads answer as the probe did with net/http: status,
// and whether the connection could carry another request.
func referenceResponse(answer []byte) (status int, keep bool, err error) {
	br := bufio.NewReader(bytes.NewReader(answer))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, false, err
	}
	n, rerr := io.CopyN(io.Discard, resp.Body, maxBody+1)
	resp.Body.Close()
	return resp.StatusCode, rerr == io.EOF && n <= maxBody && !resp.Close && br.Buffered() == 0, nil
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
