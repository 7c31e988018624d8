package load

import (
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
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
