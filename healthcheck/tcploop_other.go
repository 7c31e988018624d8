//go:build !linux

package healthcheck

import (
	"context"
	"errors"
	"time"

	"github.com/xdsbridge/xdsbridge/sources"
)

// tcpDest is unused where there is no connect loop: TCP checks dial in
// goroutines with net.Dialer.
type tcpDest = any

func tcpDestOf(sources.HostKey) tcpDest { return nil }

// tcpLoop is the connect loop, Linux only (tcploop_linux.go).
type tcpLoop struct{}

func newTCPLoop(func(t *target, err error, start, end time.Time)) (*tcpLoop, error) {
	return nil, errors.ErrUnsupported
}

func (*tcpLoop) run(context.Context) {}

func (*tcpLoop) start(*target, tcpDest, time.Duration) bool { return false }
