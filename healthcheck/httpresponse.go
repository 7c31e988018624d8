package healthcheck

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
)

// maxHeaderBytes bounds the status line and headers of a probe's response.
const maxHeaderBytes = 64 << 10

var (
	errHeaderTooLong = errors.New("malformed HTTP response: headers longer than 64 KiB")
	errMalformed     = errors.New("malformed HTTP response")
)

// readResponse reads one HTTP/1.x response to a GET from br: the status
// line, the headers, and at most maxBody of the body, discarded. err is
// not nil when no well-formed status line and headers arrived.
// keep reports whether the response was read whole, framed by its length
// or chunks, within maxBody, and the server did not ask to close (HTTP/1.1
// without "Connection: close", or HTTP/1.0 with "keep-alive"); the caller
// also checks that nothing more arrived.
//
// It reads what a probe needs and allocates nothing on the way: the
// status code, Content-Length, Transfer-Encoding and Connection; other
// headers are skipped.
func readResponse(br *bufio.Reader) (status int, keep bool, err error) {
	minor, status, n, err := readStatusLine(br, maxHeaderBytes)
	if err != nil {
		return 0, false, err
	}
	contentLength := int64(-1)
	var chunked, closeConn, keepAlive bool
	// prev is the kind of the last header line, for a folded line
	// (obs-fold) that goes on with its value.
	const (
		prevNone = iota
		prevOther
		prevFraming // Content-Length, Transfer-Encoding
		prevConnection
	)
	prev := prevNone
	for {
		line, m, err := readLine(br, maxHeaderBytes-n)
		if err != nil {
			return 0, false, err
		}
		n += m
		if len(line) == 0 {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			// obs-fold: a client reads it as spaces in the previous
			// value (RFC 9112 5.2). A folded Connection keeps nothing;
			// folded framing is not trusted.
			if prev == prevNone || prev == prevFraming || !validHeader([]byte("x"), line) {
				return 0, false, fmt.Errorf("%w: header line %q", errMalformed, truncate(line))
			}
			closeConn = closeConn || prev == prevConnection
			continue
		}
		prev = prevOther
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || !validHeader(name, value) {
			return 0, false, fmt.Errorf("%w: header line %q", errMalformed, truncate(line))
		}
		value = bytes.TrimSpace(value)
		switch {
		case asciiEqualFold(name, "content-length"):
			prev = prevFraming
			v, ok := parseDecimal(value)
			if !ok || (contentLength >= 0 && v != contentLength) {
				return 0, false, fmt.Errorf("%w: Content-Length %q", errMalformed, truncate(value))
			}
			contentLength = v
		case asciiEqualFold(name, "transfer-encoding"):
			prev = prevFraming
			if minor == 0 {
				continue // HTTP/1.0 has no transfer codings
			}
			if !asciiEqualFold(value, "chunked") || chunked {
				return 0, false, fmt.Errorf("%w: Transfer-Encoding %q", errMalformed, truncate(value))
			}
			chunked = true
		case asciiEqualFold(name, "connection"):
			prev = prevConnection
			for tok := range bytes.SplitSeq(value, []byte(",")) {
				tok = bytes.TrimSpace(tok)
				closeConn = closeConn || asciiEqualFold(tok, "close")
				keepAlive = keepAlive || asciiEqualFold(tok, "keep-alive")
			}
		}
	}
	keep = !closeConn && (minor >= 1 || keepAlive)

	switch {
	case status/100 == 1 || status == 204 || status == 304:
		// No body.
	case chunked:
		keep = discardChunked(br) && keep
	case contentLength > maxBody:
		keep = false
	case contentLength >= 0:
		if _, err := br.Discard(int(contentLength)); err != nil {
			keep = false
		}
	default:
		// The body ends with the connection: read it (so that the server
		// closes first) up to maxBody.
		_, _ = io.CopyN(io.Discard, br, maxBody+1)
		keep = false
	}
	return status, keep, nil
}

// readStatusLine reads the status line, of at most limit bytes, and the
// bytes read. A line longer than br's buffer (a long reason phrase, which
// net/http reads as well) is parsed from its first part, and the rest is
// skipped.
func readStatusLine(br *bufio.Reader, limit int) (minor, status, n int, err error) {
	line, err := br.ReadSlice('\n')
	if !errors.Is(err, bufio.ErrBufferFull) {
		line, n, err = readLineEnd(line, err, limit)
		if err != nil {
			return 0, 0, 0, err
		}
	}
	minor, status, ok := parseStatusLine(line)
	if !ok {
		return 0, 0, 0, fmt.Errorf("%w: status line %q", errMalformed, truncate(line))
	}
	if n > 0 {
		return minor, status, n, nil
	}
	for n = len(line); errors.Is(err, bufio.ErrBufferFull) && n <= limit; n += len(line) {
		line, err = br.ReadSlice('\n')
	}
	switch {
	case n > limit:
		return 0, 0, 0, errHeaderTooLong
	case err == io.EOF:
		return 0, 0, 0, io.ErrUnexpectedEOF
	case err != nil:
		return 0, 0, 0, err
	}
	return minor, status, n, nil
}

// readLine reads a line ending in LF of at most limit bytes and returns it
// without its CRLF or LF, and the bytes read. The line is valid until the
// next read from br.
func readLine(br *bufio.Reader, limit int) ([]byte, int, error) {
	line, err := br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		// A line longer than the buffer: only headers a probe skips are
		// that long, or a folded line going on with one (it starts with
		// a space or tab). Check it and skip it whole, within limit.
		// A segment cut at the buffer's end may end with the CR of the
		// line's CRLF (cr): it is, when the next segment is the LF alone,
		// and a CR in the value (invalid) otherwise.
		fold := line[0] == ' ' || line[0] == '\t'
		seg, cr := bytes.CutSuffix(line, []byte("\r"))
		name, value, ok := bytes.Cut(seg, []byte(":"))
		valid := fold && validHeader([]byte("x"), seg) || !fold && ok && validHeader(name, value)
		n := len(line)
		for errors.Is(err, bufio.ErrBufferFull) && n <= limit {
			line, err = br.ReadSlice('\n')
			n += len(line)
			valid = valid && (!cr || err == nil && len(line) == 1)
			seg = line
			if err == nil {
				seg = bytes.TrimSuffix(bytes.TrimSuffix(seg, []byte("\n")), []byte("\r"))
			} else {
				seg, cr = bytes.CutSuffix(seg, []byte("\r"))
			}
			valid = valid && validHeader([]byte("x"), seg)
		}
		switch {
		case n > limit:
			return nil, 0, errHeaderTooLong
		case err == nil && !valid:
			return nil, 0, fmt.Errorf("%w: a long header line", errMalformed)
		case err == nil && fold:
			return []byte(" "), n, nil
		case err == nil:
			return []byte("x-skipped: "), n, nil
		}
	}
	return readLineEnd(line, err, limit)
}

// readLineEnd is readLine's end for a line that fit br's buffer: line
// and err are what ReadSlice returned.
func readLineEnd(line []byte, err error, limit int) ([]byte, int, error) {
	if len(line) > limit {
		return nil, 0, errHeaderTooLong
	}
	if err != nil {
		if err == io.EOF && len(line) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, 0, err
	}
	n := len(line)
	line = line[:len(line)-1]
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	return line, n, nil
}

// parseStatusLine parses "HTTP/1.x NNN reason". Like net/http, it takes
// more than one space before the code.
func parseStatusLine(line []byte) (minor, status int, ok bool) {
	if len(line) < 9 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return 0, 0, false
	}
	if line[7] < '0' || line[7] > '9' {
		return 0, 0, false
	}
	code := bytes.TrimLeft(line[9:], " ")
	if len(code) < 3 || (len(code) > 3 && code[3] != ' ') {
		return 0, 0, false
	}
	for _, c := range code[:3] {
		if c < '0' || c > '9' {
			return 0, 0, false
		}
		status = status*10 + int(c-'0')
	}
	return int(line[7] - '0'), status, true
}

// discardChunked reads a chunked body and reports whether it ended well,
// within maxBody and with no trailers.
func discardChunked(br *bufio.Reader) bool {
	total := 0
	for {
		// A chunk-size line ends with CRLF: net/http refuses a bare LF
		// there (request smuggling), so the probe does not trust it.
		line, err := br.ReadSlice('\n')
		if err != nil || len(line) > 1024 || !bytes.HasSuffix(line, []byte("\r\n")) {
			return false
		}
		line = line[:len(line)-2]
		size, _, _ := bytes.Cut(bytes.TrimRight(line, " \t"), []byte(";"))
		n, ok := parseHex(size)
		if !ok {
			return false
		}
		if n == 0 {
			break
		}
		if total += n; total > maxBody {
			return false
		}
		if _, err := br.Discard(n); err != nil || !discardCRLF(br) {
			return false
		}
	}
	// No trailers: a probe keeps the connection only after the plain end.
	return discardCRLF(br)
}

// discardCRLF reads CRLF, and reports whether that was what came.
func discardCRLF(br *bufio.Reader) bool {
	b, err := br.Peek(2)
	if err != nil || b[0] != '\r' || b[1] != '\n' {
		return false
	}
	_, _ = br.Discard(2)
	return true
}

// validHeader reports whether name is a token and value holds no control
// character but tabs (RFC 9110), as net/http reads them: it also accepts
// spaces in a name (go.dev/issue/34540), and such a header is not one a
// probe reads (not "Content-Length ", say), as net/http does not
// recognise it either.
func validHeader(name, value []byte) bool {
	if len(name) == 0 {
		return false
	}
	for _, c := range name {
		if c < ' ' || c >= 0x7f || bytes.IndexByte([]byte(`"(),/:;<=>?@[\]{}`), c) >= 0 {
			return false
		}
	}
	for _, c := range value {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// parseDecimal parses a non-negative decimal below 2⁶³ (net/http's
// bound on a Content-Length).
func parseDecimal(b []byte) (int64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var v int64
	for _, c := range b {
		if c < '0' || c > '9' || v > (math.MaxInt64-int64(c-'0'))/10 {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	return v, true
}

// parseHex parses a chunk size of at most 7 hex digits (more is beyond
// maxBody anyway).
func parseHex(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 7 {
		return 0, false
	}
	v := 0
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | int(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | int(c-'a'+10)
		case c >= 'A' && c <= 'F':
			v = v<<4 | int(c-'A'+10)
		default:
			return 0, false
		}
	}
	return v, true
}

// asciiEqualFold reports whether b equals the lower-case ASCII s, ignoring
// case.
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// truncate shortens what goes into an error message.
func truncate(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + "…"
	}
	return string(b)
}
