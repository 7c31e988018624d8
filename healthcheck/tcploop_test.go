package healthcheck

import (
	"context"
	"errors"
	"net"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/xdsbridge/xdsbridge/sources"
)

// tcpProbers runs a TCP check test with the connect loop (Linux) and with
// the portable path (net.Dialer in a goroutine), checking that each probe
// went where it should.
func tcpProbers(t *testing.T, test func(t *testing.T, start func(...Target) *harness)) {
	for _, portable := range []bool{false, true} {
		name := "loop"
		if portable {
			name = "portable"
		}
		t.Run(name, func(t *testing.T) {
			if !portable && runtime.GOOS != "linux" {
				t.Skip("the connect loop is Linux only")
			}
			verifyNoLeaks(t)
			var h *harness
			test(t, func(ts ...Target) *harness {
				h = startPortable(t, portable, ts...)
				return h
			})
			if h == nil {
				return
			}
			h.stop()
			if n := h.c.loopProbes.Load(); portable != (n == 0) {
				t.Errorf("%d probes on the connect loop (portable: %v)", n, portable)
			}
		})
	}
}

// startPortable is startChecker with the TCP checks on the connect loop or
// on the portable path.
func startPortable(t *testing.T, portable bool, ts ...Target) *harness {
	t.Helper()
	h := startChecker(t, Options{})
	h.c.portableTCP = portable
	if err := h.c.SetTargets(ts); err != nil {
		t.Fatal(err)
	}
	return h
}

// readUntilError accepts one connection on ln and reads (and discards)
// until an error, which it sends.
func readUntilError(ln net.Listener) <-chan error {
	got := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- err
			return
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(waitLimit))
		buf := make([]byte, 4096)
		for {
			if _, err = c.Read(buf); err != nil {
				got <- err
				return
			}
		}
	}()
	return got
}

// acceptAll accepts and closes connections on ln until it closes.
func acceptAll(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}

func TestTCPCheckAccepted(t *testing.T) {
	for _, network := range []string{"tcp4", "tcp6"} {
		t.Run(network, func(t *testing.T) {
			addr := "127.0.0.1:0"
			if network == "tcp6" {
				addr = "[::1]:0"
			}
			ln, err := net.Listen(network, addr)
			if err != nil {
				t.Skipf("no %s loopback: %v", network, err)
			}
			defer ln.Close()
			go acceptAll(ln)
			tcpProbers(t, func(t *testing.T, start func(...Target) *harness) {
				tg := Target{Host: hostOf(ln.Addr()), Check: tcpCheck(10)}
				h := start(tg)
				st := h.waitProbes(tg.Key(), 3)
				if st.Verdict != Healthy || st.LastResult != "ok" || st.LastError != "" || st.ConsecutiveSuccesses < 3 {
					t.Errorf("state %+v", st)
				}
			})
		})
	}
}

// A refused connect is a failure worded the same on both paths.
func TestTCPCheckRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host := hostOf(ln.Addr())
	ln.Close()
	tcpProbers(t, func(t *testing.T, start func(...Target) *harness) {
		tg := Target{Host: host, Check: tcpCheck(10, func(c *Config) { c.UnhealthyThreshold = 2 })}
		h := start(tg)
		h.waitVerdict(tg.Key(), Unhealthy)
		if st := h.state(tg.Key()); st.LastError != "dial: connect: connection refused" || st.ConsecutiveFailures < 2 {
			t.Errorf("state %+v", st)
		}
	})
}

// A connect that is never answered fails at its timeout, and a shorter
// timeout started while a longer one waits still fires on time.
func TestTCPCheckBlackholedTimesOut(t *testing.T) {
	addr, closeBH, err := blackholeListener([4]byte{127, 0, 0, 1}, 0)
	if err != nil {
		t.Skipf("no blackhole on loopback: %v", err)
	}
	defer closeBH()
	tcpProbers(t, func(t *testing.T, start func(...Target) *harness) {
		long := Target{Host: hostOf(addr), Check: tcpCheck(10, func(c *Config) { c.Timeout = ms(5000) })}
		short := Target{Host: hostOf(addr), Check: tcpCheck(1000, func(c *Config) { c.Timeout = ms(150) })}
		h := start(long)
		// The long probe waits, and the loop sleeps until its deadline
		// (it sleeps no longer than 1s while it has no other).
		time.Sleep(1200 * time.Millisecond)
		if err := h.c.SetTargets([]Target{long, short}); err != nil {
			t.Fatal(err)
		}
		st := h.waitProbes(short.Key(), 1)
		if st.LastError != "timeout" || st.LastLatency < 150*time.Millisecond || st.LastLatency > time.Second {
			t.Errorf("short probe: error %q after %v, want a timeout after 150ms", st.LastError, st.LastLatency)
		}
		if st := h.state(long.Key()); st.Probes != 0 {
			t.Errorf("the 5s probe ended early: %+v", st)
		}
	})
}

// The probe's connection is reset, not closed: no TIME_WAIT on the
// bridge's side; the backend reads a reset.
func TestTCPCheckResetsConnection(t *testing.T) {
	tcpProbers(t, func(t *testing.T, start func(...Target) *harness) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		got := readUntilError(ln)
		tg := Target{Host: hostOf(ln.Addr()), Check: tcpCheck(1000)}
		h := start(tg)
		if err := <-got; !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("backend read %v, want a connection reset", err)
		}
		h.waitProbes(tg.Key(), 1)
	})
}

// Run stopping while connects wait ends them at once without a verdict;
// the next Run probes the targets again.
func TestTCPCheckStopWhileConnecting(t *testing.T) {
	addr, closeBH, err := blackholeListener([4]byte{127, 0, 0, 1}, 0)
	if err != nil {
		t.Skipf("no blackhole on loopback: %v", err)
	}
	defer closeBH()
	tcpProbers(t, func(t *testing.T, start func(...Target) *harness) {
		tg := Target{Host: hostOf(addr), Check: tcpCheck(10, func(c *Config) { c.Timeout = ms(5000) })}
		h := start(tg)
		waitFor(t, "a probe in flight", func() bool { return h.state(tg.Key()).NextProbe.IsZero() })
		began := time.Now()
		h.stop()
		if d := time.Since(began); d > 2*time.Second {
			t.Errorf("Run took %v to return: it waited for the connect", d)
		}
		if st := h.state(tg.Key()); st.Probes != 0 || st.NextProbe.IsZero() {
			t.Errorf("after Run: %+v, want no probe counted and the target due again", st)
		}
		// Run again, with a short timeout: the target is probed.
		short := Target{Host: tg.Host, Check: tcpCheck(10, func(c *Config) { c.Timeout = ms(50) })}
		if err := h.c.SetTargets([]Target{short}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- h.c.Run(ctx) }()
		h.waitProbes(short.Key(), 1)
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

// A name (not an IP address) is dialled by net.Dialer, which resolves it.
func TestTCPCheckHostName(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go acceptAll(ln)
	tg := Target{Host: sources.HostKey{Address: "localhost", Port: hostOf(ln.Addr()).Port}, Check: tcpCheck(10)}
	h := startChecker(t, Options{}, tg)
	st := h.waitProbes(tg.Key(), 2)
	if st.Verdict != Healthy {
		t.Errorf("state %+v", st)
	}
	if n := h.c.loopProbes.Load(); n != 0 {
		t.Errorf("%d probes of a name on the connect loop", n)
	}
}

// limitFDs makes the process's next new descriptor fail with EMFILE (the
// soft RLIMIT_NOFILE lowered to the lowest free descriptor number) until
// the returned func restores the limit.
func limitFDs(t *testing.T) (restore func()) {
	t.Helper()
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Skipf("getrlimit: %v", err)
	}
	lowest, err := syscall.Dup(0)
	if err != nil {
		t.Skipf("dup: %v", err)
	}
	syscall.Close(lowest)
	lim := old
	lim.Cur = uint64(lowest)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skipf("setrlimit: %v", err)
	}
	done := false
	restore = func() {
		if !done {
			done = true
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
				t.Fatalf("restoring RLIMIT_NOFILE: %v", err)
			}
		}
	}
	t.Cleanup(restore)
	return restore
}

// The bridge out of file descriptors says nothing of the host: the probes
// fail with the error shown, the verdict stands (no endpoint is taken
// away), and probing goes on once descriptors are free again.
func TestTCPCheckOutOfDescriptorsKeepsVerdict(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go acceptAll(ln)
	tcpProbers(t, func(t *testing.T, start func(...Target) *harness) {
		tg := Target{Host: hostOf(ln.Addr()), Check: tcpCheck(100, func(c *Config) { c.UnhealthyThreshold = 2 })}
		h := start(tg)
		h.waitVerdict(tg.Key(), Healthy)
		// Between probes (no probe socket open), take the descriptors away.
		outOfDescriptors(t, h, tg.Key())
		if trs := h.transitions(tg.Key()); len(trs) != 1 || trs[0].Verdict != Healthy {
			t.Errorf("transitions %+v, want only the first Healthy", trs)
		}
		// Descriptors back: the probes succeed again.
		waitFor(t, "a probe that succeeds", func() bool { return h.state(tg.Key()).LastResult == "ok" })
	})
}

// Connects that ended while the loop was not waiting (busy, or starved of
// CPU) are successes even when their deadlines have passed meanwhile,
// however many ended: more than one epoll_wait's worth of events.
func TestTCPLoopCollectsEveryEndedConnectBeforeTimeouts(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the connect loop is Linux only")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go acceptAll(ln)
	var mu sync.Mutex
	results := map[*target]error{}
	l, err := newTCPLoop(func(tg *target, err error, _, _ time.Time) {
		mu.Lock()
		results[tg] = err
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	const n = 600
	dest := tcpDestOf(hostOf(ln.Addr()))
	for range n {
		if !l.start(&target{}, dest, 50*time.Millisecond) {
			t.Fatal("start refused")
		}
	}
	// The connects end on loopback at once; run starts after their
	// deadlines.
	time.Sleep(150 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.run(ctx); close(done) }()
	waitFor(t, "every probe's end", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(results) == n
	})
	cancel()
	<-done
	timeouts := 0
	for _, err := range results {
		if err != nil {
			timeouts++
			if !errors.Is(err, errTimeout) {
				t.Errorf("probe error %v", err)
			}
		}
	}
	if timeouts > 0 {
		t.Errorf("%d of %d connects that ended before run looked were failed as timeouts", timeouts, n)
	}
}
