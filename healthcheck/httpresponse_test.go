package healthcheck

import (
	"bufio"
	"errors"
	"strings"
	"testing"
)

// A header folded over lines (obs-fold, RFC 9112 5.2: a client replaces
// it with spaces) is read as net/http reads it: the status stands. A
// folded Connection header keeps no connection (its words are not read).
func TestHTTPResponseFoldedHeader(t *testing.T) {
	for _, tc := range []struct {
		answer string
		keep   bool
	}{
		{"HTTP/1.1 200 OK\r\nX-Long: a\r\n b\r\n\tc\r\nContent-Length: 0\r\n\r\n", true},
		{"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: keep-alive,\r\n close\r\n\r\n", false},
		// Folded lines longer than the read buffer.
		{"HTTP/1.1 200 OK\r\nX-Long: a\r\n " + strings.Repeat("b", 5000) + "\r\nContent-Length: 0\r\n\r\n", true},
		{"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: keep-alive\r\n " + strings.Repeat("b", 5000) + "\r\n\r\n", false},
	} {
		status, keep, err := readResponse(bufio.NewReaderSize(strings.NewReader(tc.answer), 4096))
		if err != nil || status != 200 || keep != tc.keep {
			t.Errorf("%q: status %d, keep %v, error %v; want 200, keep %v", tc.answer, status, keep, err, tc.keep)
		}
		if _, _, err := referenceResponse([]byte(tc.answer)); err != nil {
			t.Errorf("%q: net/http refuses it: %v", tc.answer, err)
		}
	}
	// Folded framing headers, and a fold before any header, stay errors.
	for _, answer := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\n X-A: a\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n " + strings.Repeat("0", 5000) + "\r\n\r\n",
		"HTTP/1.1 200 OK\r\n " + strings.Repeat("a", 5000) + "\r\n\r\n",
	} {
		if _, _, err := readResponse(bufio.NewReaderSize(strings.NewReader(answer), 4096)); err == nil {
			t.Errorf("%q: no error", answer)
		}
		if _, _, err := referenceResponse([]byte(answer)); err == nil {
			t.Errorf("%q: net/http reads it", answer)
		}
	}
}

// Headers over 64 KiB are refused where net/http reads them, one of the
// differences FuzzHTTPResponse allows (refusedOnPurpose). Tested here
// rather than seeded: the fuzzer's minimization of a 68 KB input holds a
// worker for up to -fuzzminimizetime, and fuzzing stops meanwhile.
func TestHTTPResponseHeadersOver64KiB(t *testing.T) {
	answer := "HTTP/1.1 204 No Content\r\n" + strings.Repeat("X-Long: "+strings.Repeat("x", 4000)+"\r\n", 17) + "\r\n"
	if _, _, err := readResponse(bufio.NewReaderSize(strings.NewReader(answer), 4096)); !errors.Is(err, errHeaderTooLong) {
		t.Errorf("error %v, want %v", err, errHeaderTooLong)
	}
	if _, _, err := referenceResponse([]byte(answer)); err != nil {
		t.Errorf("net/http refuses it (%v): no longer a difference", err)
	}
	if refusedOnPurpose([]byte(answer)) == "" {
		t.Error("not listed as a deliberate difference")
	}
}

// A header line longer than the read buffer is read whole wherever its
// CR falls, the last byte of the buffer included (then its LF comes in
// the next read): net/http reads such a response, and so does a probe.
func TestHTTPResponseLongLineCRAtBufferEnd(t *testing.T) {
	const size = 4096
	for i, answer := range []string{
		"HTTP/1.1 200 OK\r\nX-Long: " + strings.Repeat("a", size-len("X-Long: ")-1) + "\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX-Long: a\r\n " + strings.Repeat("b", size-2) + "\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX-Long: " + strings.Repeat("a", 2*size-len("X-Long: ")-1) + "\r\nContent-Length: 0\r\n\r\n",
	} {
		status, keep, err := readResponse(bufio.NewReaderSize(strings.NewReader(answer), size))
		if err != nil || status != 200 || !keep {
			t.Errorf("answer %d: status %d, keep %v, error %v; want 200, keep", i, status, keep, err)
		}
		if _, _, err := referenceResponse([]byte(answer)); err != nil {
			t.Errorf("answer %d: net/http refuses it: %v", i, err)
		}
	}
	// A CR at the buffer's end that is not the line's stays an error.
	answer := "HTTP/1.1 200 OK\r\nX-Long: " + strings.Repeat("a", size-len("X-Long: ")-1) + "\rb\r\nContent-Length: 0\r\n\r\n"
	if _, _, err := readResponse(bufio.NewReaderSize(strings.NewReader(answer), size)); err == nil {
		t.Error("a bare CR at the buffer's end: no error")
	}
	if _, _, err := referenceResponse([]byte(answer)); err == nil {
		t.Error("net/http reads a bare CR")
	}
}
