package xds

import (
	"net"
	"testing"
)

// The tracker knows each accepted connection by its remote address until
// it is closed, and names none for an address two connections share.
func TestConnTracker(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr := newConnTracker(lis)
	defer tr.Close()
	var clients, accepted []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
		a, err := tr.Accept()
		if err != nil {
			t.Fatal(err)
		}
		accepted = append(accepted, a)
	}
	if n := tr.len(); n != 3 {
		t.Fatalf("tracked %d, want 3", n)
	}
	for i, c := range clients {
		if got := tr.lookup(c.LocalAddr()); got != accepted[i] {
			t.Errorf("lookup(%v) = %v, want connection %d", c.LocalAddr(), got, i)
		}
	}
	accepted[0].Close()
	accepted[0].Close() // twice: removed once
	if got := tr.lookup(clients[0].LocalAddr()); got != nil {
		t.Errorf("a closed connection still found")
	}
	if n := tr.len(); n != 2 {
		t.Fatalf("tracked %d after a close, want 2", n)
	}
	// Two connections with one address (unnamed unix sockets): neither.
	dup := &trackedConn{Conn: accepted[1], t: tr, key: addrKey(clients[1].LocalAddr())}
	tr.mu.Lock()
	tr.conns[dup.key] = append(tr.conns[dup.key], dup)
	tr.mu.Unlock()
	if got := tr.lookup(clients[1].LocalAddr()); got != nil {
		t.Errorf("lookup of a shared address = %v, want nil", got)
	}
	tr.remove(dup)
	for _, a := range accepted[1:] {
		a.Close()
	}
	if n := tr.len(); n != 0 || len(tr.conns) != 0 {
		t.Fatalf("tracked %d (%d keys) after every close, want 0", n, len(tr.conns))
	}
}
