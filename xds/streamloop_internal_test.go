package xds

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// What the delta and sotw stream tests (deltarecv_stress_internal_test.go,
// sotwrecv_internal_test.go) drive alike: a stream's handler, started,
// ending under load.

// lockedQueues is a cache in miniature: the queues of its live watches,
// answered by answer under its lock, each once; a watch cancelled is
// answered no more.
type lockedQueues[R any] struct {
	mu    sync.Mutex
	live  map[*int]respQueue[R]
	types map[*int]string
}

// add makes a watch of typ whose responses go on q, and returns its
// cancel.
func (w *lockedQueues[R]) add(typ string, q respQueue[R]) func() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.live == nil {
		w.live, w.types = map[*int]respQueue[R]{}, map[*int]string{}
	}
	k := new(int)
	w.live[k], w.types[k] = q, typ
	return func() {
		w.mu.Lock()
		delete(w.live, k)
		w.mu.Unlock()
	}
}

// answer puts a response of typ (mk) on the queue of each live watch of
// typ.
func (w *lockedQueues[R]) answer(typ string, mk func(typ string) R) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, q := range w.live {
		if w.types[k] == typ {
			delete(w.live, k) // answered once
			q.put(mk(typ))
		}
	}
}

// endsOnBadRequest has a client answer its type's responses (ack, sent on
// reqs) while commit answers its watch, then send bad, a request the
// receive goroutine fails to handle: the handler (done) must end with
// InvalidArgument. cancel ends the client's stream.
func endsOnBadRequest[R any](t *testing.T, reqs chan<- R, commit func(), ack func() R, bad R, done <-chan error, cancel func()) {
	t.Helper()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	untilStopped(&wg, stop, func() bool {
		commit()
		select {
		case reqs <- ack():
			return true
		case <-stop:
			return false
		}
	})
	time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		select {
		case reqs <- bad:
		case <-time.After(5 * time.Second):
		}
	}()
	select {
	case err := <-done:
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("stream ended with %v, want InvalidArgument", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stream did not end on the request's error")
	}
	close(stop)
	wg.Wait()
	cancel()
	<-sent
}

// shutsDownUnderLoad has commit answer a stream's watches of both types
// and its client answer them (ack(type), sent on reqs), and stops the
// server (stopServer) at a random point: the handler (done) must return
// nil. Then commit finds no watch (the caller checks nothing was sent
// after the handler returned).
func shutsDownUnderLoad[R any](t *testing.T, reqs chan<- R, commit func(typ string), ack func(typ string) R, stopServer func(), done <-chan error) {
	t.Helper()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	untilStopped(&wg, stop, func() bool {
		commit(ClusterType)
		commit(EndpointType)
		time.Sleep(time.Duration(rand.IntN(30)) * time.Microsecond)
		return true
	})
	i := 0
	untilStopped(&wg, stop, func() bool {
		typ := ClusterType
		if i%2 == 1 {
			typ = EndpointType
		}
		i++
		select {
		case reqs <- ack(typ):
			return true
		case <-stop:
			return false
		}
	})
	time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
	stopServer()
	if err := handlerReturned(t, done); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	// Nothing is put after the watches were cancelled; a late commit
	// finds none.
	commit(ClusterType)
	commit(EndpointType)
}

// handlerReturned returns what a stream handler started with done
// returned, failing the test if it does not return within 5 s.
func handlerReturned(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("the handler did not return")
		return nil
	}
}
