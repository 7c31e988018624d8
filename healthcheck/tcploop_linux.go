//go:build linux

package healthcheck

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/xdsbridge/xdsbridge/sources"
)

// tcpDest is where a TCP check connects: a socket address, reused by every
// probe of its target (at most one is in flight).
type tcpDest = syscall.Sockaddr

// tcpDestOf returns h's socket address, or nil when h is not an IP address
// (a name to resolve, or an IPv6 address with a zone): such a check dials
// in a goroutine with net.Dialer.
func tcpDestOf(h sources.HostKey) tcpDest {
	ip, err := netip.ParseAddr(h.Address)
	if err != nil || ip.Zone() != "" || h.Port == 0 || h.Port > 65535 {
		return nil
	}
	ip = ip.Unmap()
	if ip.Is4() {
		return &syscall.SockaddrInet4{Port: int(h.Port), Addr: ip.As4()}
	}
	return &syscall.SockaddrInet6{Port: int(h.Port), Addr: ip.As16()}
}

// tcpLoop runs TCP connect probes with no goroutine, timer or net.Conn per
// probe: the scheduler opens a non-blocking socket with SO_LINGER 0 and
// starts its connect (start); one goroutine (run) waits on an epoll
// instance for the connects to end, and for the earliest deadline of those
// still pending, which it fails as timeouts. Either way the socket is then
// closed, which resets a connection that opened: no TIME_WAIT on the
// bridge's side. A probe costs the socket, connect, epoll_ctl, getsockopt
// and close system calls and no allocation.
type tcpLoop struct {
	epfd int
	pipe [2]int // the read end is in the epoll set: a byte written wakes run
	// done reports the end of a probe. It is called outside mu, from run,
	// or from start when the connect ends at once.
	done func(t *target, err error, start, end time.Time)

	mu        sync.Mutex
	closed    bool // run has ended the pending connects: start no more
	fdsClosed bool
	ops       []*tcpOp // by slot; the slot is the epoll event's data
	free      []int32
	byDl      deadlines
	// sleepUntil is when run's wait ends at the latest (zero while it
	// does not wait); a connect with an earlier deadline wakes it.
	sleepUntil time.Time
	// minTimeout is the shortest timeout started so far: with no connect
	// pending, run sleeps no longer than that.
	minTimeout time.Duration
}

// tcpOp is one pending connect.
type tcpOp struct {
	t        *target
	fd       int
	slot     int32
	idx      int // in byDl
	start    time.Time
	deadline time.Time
}

// tcpEnd is a probe that ended: its socket to close and its result.
type tcpEnd struct {
	t          *target
	fd         int
	err        error
	start, end time.Time
}

var (
	errTimeout = errors.New("timeout")
	errStopped = errors.New("stopped")
)

func newTCPLoop(done func(t *target, err error, start, end time.Time)) (*tcpLoop, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	l := &tcpLoop{epfd: epfd, done: done, minTimeout: time.Second}
	if err := syscall.Pipe2(l.pipe[:], syscall.O_NONBLOCK|syscall.O_CLOEXEC); err != nil {
		syscall.Close(epfd)
		return nil, fmt.Errorf("pipe2: %w", err)
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(l.pipe[0]), Pad: -1}
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, l.pipe[0], &ev); err != nil {
		l.closeFDs()
		return nil, fmt.Errorf("epoll_ctl: %w", err)
	}
	return l, nil
}

func (l *tcpLoop) closeFDs() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fdsClosed = true
	syscall.Close(l.pipe[0])
	syscall.Close(l.pipe[1])
	syscall.Close(l.epfd)
}

// wake makes run's wait return.
func (l *tcpLoop) wake() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.wakeLocked()
}

// wakeLocked is wake with mu held. Once the descriptors are closed, their
// numbers may belong to others: nothing is written.
func (l *tcpLoop) wakeLocked() {
	if !l.fdsClosed {
		_, _ = syscall.Write(l.pipe[1], []byte{0})
	}
}

// start begins a connect probe of t to dest with the given timeout, and
// returns false (having done nothing) when the loop has stopped.
func (l *tcpLoop) start(t *target, dest tcpDest, timeout time.Duration) bool {
	start := time.Now()
	family := syscall.AF_INET
	if _, ok := dest.(*syscall.SockaddrInet6); ok {
		family = syscall.AF_INET6
	}
	fd, err := syscall.Socket(family, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, syscall.IPPROTO_TCP)
	if err != nil {
		l.done(t, dialError("socket", err), start, time.Now())
		return true
	}
	// Closing the socket resets a connection that opened (no TIME_WAIT).
	if err := syscall.SetsockoptLinger(fd, syscall.SOL_SOCKET, syscall.SO_LINGER, &syscall.Linger{Onoff: 1, Linger: 0}); err != nil {
		syscall.Close(fd)
		l.done(t, dialError("setsockopt", err), start, time.Now())
		return true
	}
	if errno := connectFault.Load(); errno != nil {
		err = *errno
	} else {
		err = syscall.Connect(fd, dest)
	}
	if err != syscall.EINPROGRESS {
		syscall.Close(fd)
		if err != nil {
			err = dialError("connect", err)
		}
		l.done(t, err, start, time.Now())
		return true
	}

	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		syscall.Close(fd)
		return false
	}
	op := l.alloc()
	op.t, op.fd, op.start, op.deadline = t, fd, start, start.Add(timeout)
	// Registered under mu, so that run cannot time the connect out and
	// close its descriptor before it is in the epoll set.
	ev := syscall.EpollEvent{Events: syscall.EPOLLOUT | syscall.EPOLLONESHOT, Fd: int32(fd), Pad: op.slot}
	if err := syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		l.release(op)
		l.mu.Unlock()
		syscall.Close(fd)
		l.done(t, dialError("epoll_ctl", err), start, time.Now())
		return true
	}
	heap.Push(&l.byDl, op)
	l.minTimeout = min(l.minTimeout, timeout)
	if !l.sleepUntil.IsZero() && op.deadline.Before(l.sleepUntil) {
		l.sleepUntil = op.deadline
		l.wakeLocked()
	}
	l.mu.Unlock()
	return true
}

// alloc returns a free op. Called with mu held.
func (l *tcpLoop) alloc() *tcpOp {
	if n := len(l.free); n > 0 {
		slot := l.free[n-1]
		l.free = l.free[:n-1]
		return l.ops[slot]
	}
	op := &tcpOp{slot: int32(len(l.ops)), idx: -1}
	l.ops = append(l.ops, op)
	return op
}

// release frees op's slot. Called with mu held.
func (l *tcpLoop) release(op *tcpOp) {
	op.t, op.fd = nil, -1
	l.free = append(l.free, op.slot)
}

// end removes the pending op and returns its end. Called with mu held.
func (l *tcpLoop) end(op *tcpOp, err error, now time.Time) tcpEnd {
	e := tcpEnd{t: op.t, fd: op.fd, err: err, start: op.start, end: now}
	if op.idx >= 0 {
		heap.Remove(&l.byDl, op.idx)
	}
	l.release(op)
	return e
}

// run waits for the connects to end until ctx is done; it then fails the
// pending ones (errStopped), and start does nothing more.
func (l *tcpLoop) run(ctx context.Context) {
	defer l.closeFDs()
	stop := context.AfterFunc(ctx, l.wake)
	defer stop()
	events := make([]syscall.EpollEvent, 256)
	var ended []tcpEnd
	for {
		l.mu.Lock()
		now := time.Now()
		if len(l.byDl) > 0 && !l.byDl[0].deadline.After(now) {
			// Connects may have ended since the last wait (this goroutine
			// was busy or not running): collect them before failing any
			// as a timeout, all of them: as many waits as it takes.
			for {
				l.mu.Unlock()
				n, err := syscall.EpollWait(l.epfd, events, 0)
				l.mu.Lock()
				if err == syscall.EINTR {
					continue
				}
				ended = l.collect(events[:max(n, 0)], now, ended)
				if n < len(events) {
					break
				}
			}
		}
		for len(l.byDl) > 0 && !l.byDl[0].deadline.After(now) {
			ended = append(ended, l.end(l.byDl[0], errTimeout, now))
		}
		stopping := ctx.Err() != nil
		if stopping {
			l.closed = true
			for len(l.byDl) > 0 {
				ended = append(ended, l.end(l.byDl[0], errStopped, now))
			}
		}
		// Sleep until the earliest deadline, and with none pending no
		// longer than the shortest timeout: a connect started meanwhile
		// has a later deadline, so start wakes run only for a connect
		// with a shorter timeout than any before.
		l.sleepUntil = now.Add(l.minTimeout)
		if len(l.byDl) > 0 {
			l.sleepUntil = l.byDl[0].deadline
		}
		msec := int((l.sleepUntil.Sub(now) + time.Millisecond - 1) / time.Millisecond)
		l.mu.Unlock()

		l.finish(ended)
		clear(ended)
		ended = ended[:0]
		if stopping {
			return
		}

		n, err := syscall.EpollWait(l.epfd, events, msec)
		if err != nil && err != syscall.EINTR {
			// Not expected (a bad descriptor would be a bug): keep the
			// deadlines, at a pace that cannot spin.
			time.Sleep(time.Millisecond)
		}
		now = time.Now()
		l.mu.Lock()
		l.sleepUntil = time.Time{}
		ended = l.collect(events[:max(n, 0)], now, ended)
		l.mu.Unlock()
	}
}

// collect ends the connects that events report, at now, and drains the
// wake-up pipe. Called with mu held.
func (l *tcpLoop) collect(events []syscall.EpollEvent, now time.Time, ended []tcpEnd) []tcpEnd {
	for _, ev := range events {
		if ev.Pad < 0 {
			var b [64]byte
			for {
				if n, _ := syscall.Read(l.pipe[0], b[:]); n < len(b) {
					break
				}
			}
			continue
		}
		op := l.ops[ev.Pad]
		if op.t == nil || op.fd != int(ev.Fd) {
			continue
		}
		var perr error
		if soerr, err := syscall.GetsockoptInt(op.fd, syscall.SOL_SOCKET, syscall.SO_ERROR); err != nil {
			perr = dialError("getsockopt", err)
		} else if soerr != 0 {
			perr = dialError("connect", syscall.Errno(soerr))
		}
		ended = append(ended, l.end(op, perr, now))
	}
	return ended
}

// finish closes the ended probes' sockets and reports them.
func (l *tcpLoop) finish(ended []tcpEnd) {
	for _, e := range ended {
		syscall.Close(e.fd)
		l.done(e.t, e.err, e.start, e.end)
	}
}

// dialError words a system call's failure as probeError words net.Dialer's
// (State.LastError), e.g. "dial: connect: connection refused".
func dialError(call string, err error) error {
	return fmt.Errorf("dial: %s: %w", call, err)
}

// deadlines is a heap of pending connects by deadline.
type deadlines []*tcpOp

func (h deadlines) Len() int           { return len(h) }
func (h deadlines) Less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }
func (h deadlines) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx = i
	h[j].idx = j
}
func (h *deadlines) Push(x any) {
	op := x.(*tcpOp)
	op.idx = len(*h)
	*h = append(*h, op)
}
func (h *deadlines) Pop() any {
	old := *h
	n := len(old)
	op := old[n-1]
	old[n-1] = nil
	op.idx = -1
	*h = old[:n-1]
	return op
}
