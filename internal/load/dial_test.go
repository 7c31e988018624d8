package load

import (
	"io"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
)

// TestDialAllWindows checks the HTTP/2 windows a client connection
// advertises: Envoy's with DeltaWindow set (the stream's in SETTINGS, the
// connection's in a WINDOW_UPDATE), grpc-go's default without; and the
// number of connections for the clients.
func TestDialAllWindows(t *testing.T) {
	for _, tc := range []struct {
		name   string
		window int
		// stream: the SETTINGS_INITIAL_WINDOW_SIZE sent (0: none);
		// conn: the connection's window grown to (0: not grown).
		stream, conn uint32
	}{
		{"envoy", EnvoyWindow, EnvoyWindow, EnvoyWindow},
		{"grpc-go", 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer lis.Close()
			conns, err := dialAll(lis.Addr().String(), 5, 2, tc.window)
			defer closeAll(conns)
			if err != nil {
				t.Fatal(err)
			}
			if len(conns) != 3 {
				t.Fatalf("5 clients, 2 streams a connection: %d connections, want 3", len(conns))
			}
			conns[0].Connect()
			c, err := lis.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.ReadFull(c, make([]byte, len(http2.ClientPreface))); err != nil {
				t.Fatal(err)
			}
			fr := http2.NewFramer(io.Discard, c)
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			sf, ok := f.(*http2.SettingsFrame)
			if !ok {
				t.Fatalf("first frame %v, want SETTINGS", f)
			}
			got, _ := sf.Value(http2.SettingInitialWindowSize)
			if got != tc.stream {
				t.Errorf("SETTINGS_INITIAL_WINDOW_SIZE %d, want %d", got, tc.stream)
			}
			// grpc-go sends the connection's WINDOW_UPDATE right after its
			// SETTINGS, when it grows the window.
			var grown uint32
			if tc.conn > 0 {
				f, err := fr.ReadFrame()
				if err != nil {
					t.Fatal(err)
				}
				wu, ok := f.(*http2.WindowUpdateFrame)
				if !ok || wu.StreamID != 0 {
					t.Fatalf("second frame %v, want the connection's WINDOW_UPDATE", f)
				}
				grown = 65535 + wu.Increment
			}
			if grown != tc.conn {
				t.Errorf("connection window %d, want %d", grown, tc.conn)
			}
		})
	}
}

// TestRunRejectsWindowOutOfRange: a DeltaWindow grpc-go cannot advertise
// (under HTTP/2's initial 65,535 bytes, which grpc-go ignores while still
// turning its bandwidth-delay estimate off; over 2^31-1, which int32 wraps)
// is refused, not run with a static 64 KiB window that the report calls
// something else.
func TestRunRejectsWindowOutOfRange(t *testing.T) {
	for _, w := range []int{-1, 1000, 65534, math.MaxInt32 + 1, 1 << 32} {
		sc := Scenario{Name: "window", Services: 2, Endpoints: 1, Clients: 2,
			InProcess: true, Targets: []string{TargetBridge}, Timeout: 20 * time.Second, DeltaWindow: w}
		_, err := Run(sc, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "window") {
			t.Errorf("DeltaWindow %d: err %v, want it refused", w, err)
		}
	}
}

// TestDialClientsWiring: each client's connection is of its kind (delta
// clients' advertise DeltaWindow, the sotw clients' grpc-go's default),
// none carries more than StreamsPerConn streams, and the kinds' shares
// are the scenario's, also when a kind has no client or fewer clients
// than StreamsPerConn.
func TestDialClientsWiring(t *testing.T) {
	for _, tc := range []struct {
		clients, spc int
		sotw         float64
		wantSotw     int
	}{
		{10, 4, 0.2, 2},
		{20, 8, 0.25, 5},
		{3, 16, 0.2, 0},
		{5, 16, 0.2, 1},
		{7, 2, 0, 0},
		{5, 2, 1, 5},
		{0, 4, 0.2, 0},
	} {
		sc := Scenario{Clients: tc.clients, StreamsPerConn: tc.spc, SotwShare: tc.sotw, DeltaWindow: EnvoyWindow}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		isDelta, connOf, conns, err := dialClients(lis.Addr().String(), sc)
		if err != nil {
			t.Fatal(err)
		}
		// The window each connection advertises, connecting one at a time.
		window := map[*grpc.ClientConn]uint32{}
		var accepted []net.Conn
		for _, cc := range conns {
			cc.Connect()
			c, err := lis.Accept()
			if err != nil {
				t.Fatal(err)
			}
			accepted = append(accepted, c)
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.ReadFull(c, make([]byte, len(http2.ClientPreface))); err != nil {
				t.Fatal(err)
			}
			f, err := http2.NewFramer(io.Discard, c).ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			sf, ok := f.(*http2.SettingsFrame)
			if !ok {
				t.Fatalf("first frame %v, want SETTINGS", f)
			}
			window[cc], _ = sf.Value(http2.SettingInitialWindowSize)
		}
		streams := map[*grpc.ClientConn]int{}
		nSotw := 0
		for i := range tc.clients {
			want := uint32(0)
			if isDelta[i] {
				want = EnvoyWindow
			} else {
				nSotw++
			}
			w, ok := window[connOf[i]]
			if !ok {
				t.Fatalf("%+v: client %d: connection %p not among those dialled", tc, i, connOf[i])
			}
			if w != want {
				t.Errorf("%+v: client %d (delta %v): window %d, want %d", tc, i, isDelta[i], w, want)
			}
			streams[connOf[i]]++
		}
		if nSotw != tc.wantSotw {
			t.Errorf("%+v: %d sotw clients, want %d", tc, nSotw, tc.wantSotw)
		}
		ceil := func(n int) int { return (n + tc.spc - 1) / tc.spc }
		if want := ceil(tc.clients-nSotw) + ceil(nSotw); len(conns) != want {
			t.Errorf("%+v: %d connections, want %d", tc, len(conns), want)
		}
		for cc, n := range streams {
			if n > tc.spc {
				t.Errorf("%+v: connection %p carries %d streams, over %d", tc, cc, n, tc.spc)
			}
		}
		closeAll(conns)
		for _, c := range accepted {
			c.Close()
		}
		lis.Close()
	}
}
