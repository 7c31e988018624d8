package healthcheck

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/sources"
)

// blackholeListener listens on ip:port (port 0: any) with a backlog of 0
// and fills its accept queue, so that the kernel drops the SYNs sent there
// afterwards, as a blackholed host would: a connect waits out its timeout.
// It returns the listener's address and a function that closes it all.
func blackholeListener(ip [4]byte, port int) (*net.TCPAddr, func(), error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	var fill []net.Conn
	closeAll := func() {
		for _, c := range fill {
			c.Close()
		}
		syscall.Close(fd)
	}
	fail := func(err error) (*net.TCPAddr, func(), error) {
		closeAll()
		return nil, nil, err
	}
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		return fail(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: ip, Port: port}); err != nil {
		return fail(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		return fail(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		return fail(err)
	}
	addr := &net.TCPAddr{IP: net.IPv4(ip[0], ip[1], ip[2], ip[3]), Port: sa.(*syscall.SockaddrInet4).Port}
	if ip == [4]byte{} {
		addr.IP = net.IPv4(127, 0, 0, 1)
	}
	for range 4 {
		c, err := net.DialTimeout("tcp", addr.String(), 300*time.Millisecond)
		if err != nil {
			break // the queue is full
		}
		fill = append(fill, c)
	}
	if len(fill) == 0 {
		return fail(fmt.Errorf("could not fill the accept queue of %s", addr))
	}
	return addr, closeAll, nil
}

// connCountingServer is an HTTP server that counts the connections it
// accepts and the requests it answers.
type connCountingServer struct {
	host  sources.HostKey
	srv   *http.Server
	conns atomic.Int64
	reqs  atomic.Int64
}

func newConnCountingServer(t *testing.T, idle time.Duration) *connCountingServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &connCountingServer{host: hostOf(ln.Addr())}
	s.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.reqs.Add(1)
			io.WriteString(w, "ok\n")
		}),
		IdleTimeout: idle,
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				s.conns.Add(1)
			}
		},
	}
	go s.srv.Serve(ln)
	t.Cleanup(func() { s.srv.Close() })
	return s
}

func TestHTTPCheckReusesConnection(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reuse *bool
	}{{"default", nil}, {"reuse_connection false", new(false)}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newConnCountingServer(t, 0)
			tg := Target{Host: s.host, Check: httpCheck(10, func(c *Config) { c.ReuseConnection = tc.reuse })}
			h := startChecker(t, Options{}, tg)
			st := h.waitProbes(tg.Key(), 6)
			h.stop()
			if st.Verdict != Healthy || st.LastResult != "ok" {
				t.Fatalf("state %+v", st)
			}
			conns, reqs := s.conns.Load(), s.reqs.Load()
			if tc.reuse == nil && conns != 1 {
				t.Errorf("%d connections for %d requests, want 1", conns, reqs)
			}
			if tc.reuse != nil && conns != reqs {
				t.Errorf("%d connections for %d requests, want one each", conns, reqs)
			}
		})
	}
}

// A server that closes idle connections between probes (a shorter idle
// timeout than the interval) costs a reconnect, never a failed probe.
func TestHTTPCheckServerClosesIdleConnection(t *testing.T) {
	s := newConnCountingServer(t, 5*time.Millisecond)
	tg := Target{Host: s.host, Check: httpCheck(30, func(c *Config) { c.UnhealthyThreshold = 1 })}
	h := startChecker(t, Options{}, tg)
	st := h.waitProbes(tg.Key(), 8)
	if st.Verdict != Healthy || len(h.transitions(tg.Key())) != 1 {
		t.Fatalf("state %+v, transitions %v", st, h.transitions(tg.Key()))
	}
	if c := s.conns.Load(); c < 4 {
		t.Errorf("%d connections: the server's idle timeout did not close them", c)
	}
}

// Probes waiting out their timeout on blackholed hosts (SYNs dropped) hold
// no slot another probe needs: with the default bound, a healthy target
// keeps its schedule while 300 probes wait, more than DefaultWorkers.
func TestBlackholedHostsDelayNoOne(t *testing.T) {
	addr, closeBH, err := blackholeListener([4]byte{127, 0, 0, 1}, 0)
	if err != nil {
		t.Skipf("no blackhole on loopback: %v", err)
	}
	defer closeBH()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	var ts []Target
	for i := range 300 {
		// Distinct checks make distinct targets on the one address.
		ts = append(ts, Target{Host: hostOf(addr), Check: tcpCheck(200+i, func(c *Config) { c.Timeout = ms(5000) })})
	}
	ok := Target{Host: hostOf(ln.Addr()), Check: tcpCheck(20)}
	h := startChecker(t, Options{}, append(ts, ok)...)
	// Within 500ms every blackholed target has a probe waiting (first
	// probes fall in [0, interval)); none returns before 5s.
	time.Sleep(600 * time.Millisecond)
	before := h.state(ok.Key()).Probes
	time.Sleep(time.Second)
	after := h.state(ok.Key())
	if after.Probes < before+10 || after.Verdict != Healthy {
		t.Errorf("healthy target probed %d times in 1s while blackholed probes waited (state %+v)", after.Probes-before, after)
	}
	if s := h.state(ts[0].Key()); s.Probes != 0 {
		t.Errorf("a blackholed probe ended early: %+v", s)
	}
}

// An HTTP probe that gets no answer within its timeout resets its
// connection: no TIME_WAIT on the bridge's side; the backend reads a reset.
func TestHTTPCheckTimeoutResetsConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := readUntilError(ln) // the request, then no answer
	tg := Target{Host: hostOf(ln.Addr()), Check: httpCheck(1000, func(c *Config) { c.Timeout = ms(100) })}
	h := startChecker(t, Options{}, tg)
	if err := <-got; !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("backend read %v, want a connection reset", err)
	}
	if st := h.waitProbes(tg.Key(), 1); st.LastError != "timeout" {
		t.Errorf("last error %q, want timeout", st.LastError)
	}
}

// With reuse_connection: false, a probe never keeps its connection, also
// when the server ignores "Connection: close" and keeps it open.
func TestHTTPCheckNoReuseWithKeepAliveServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
					// Answers every read, closes only when the client does.
					if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n"); err != nil {
						return
					}
				}
			}()
		}
	}()
	tg := Target{Host: hostOf(ln.Addr()), Check: httpCheck(10, func(c *Config) { c.ReuseConnection = new(false) })}
	h := startChecker(t, Options{}, tg)
	st := h.waitProbes(tg.Key(), 4)
	h.stop()
	if st.Verdict != Healthy {
		t.Fatalf("state %+v", st)
	}
	if n := conns.Load(); n < int64(st.Probes) {
		t.Errorf("%d connections for %d probes, want one each", n, st.Probes)
	}
}
