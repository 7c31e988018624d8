package xds

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"unicode/utf8"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

type msg string

func (m msg) GetMessage() string { return string(m) }

// A client's node id, cluster and NACK message are stored and echoed
// bounded, and each cut is counted.
func TestClientStringsBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := NewServer(NewCache(), Options{Metrics: reg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	s.opened(context.Background(), true, 1, "")
	huge := strings.Repeat("n", 2<<20)
	node := &core.Node{Id: huge, Cluster: "c" + strings.Repeat("é", 300)}
	for i := range 3 {
		s.request(true, 1, node, EndpointType, fmt.Sprint("nonce", i), msg(strings.Repeat("x", 1<<20)), true)
	}
	cl := s.ClientStatuses()
	if len(cl) != 1 {
		t.Fatalf("clients: %+v", cl)
	}
	ci := cl[0]
	for field, v := range map[string]string{"node": ci.Node, "cluster": ci.Cluster} {
		if len(v) > MaxClientStringBytes+len("…") || !utf8.ValidString(v) || !strings.HasSuffix(v, "…") {
			t.Errorf("%s stored as %d bytes (valid UTF-8 %v)", field, len(v), utf8.ValidString(v))
		}
	}
	if len(ci.LastNACK) > MaxNACKMessageBytes+len("…") {
		t.Errorf("last_nack stored as %d bytes", len(ci.LastNACK))
	}
	// The same long id repeated on one stream is counted once.
	for field, want := range map[string]float64{"node_id": 1, "node_cluster": 1, "nack_message": 3} {
		if got := testutil.ToFloat64(s.m.truncated.WithLabelValues(field)); got != want {
			t.Errorf("truncated{field=%s} = %v, want %v", field, got, want)
		}
	}
	// Short values are kept as sent.
	s.request(true, 1, &core.Node{Id: "envoy-1", Cluster: "edge"}, EndpointType, "", nil, false)
	if ci := s.ClientStatuses()[0]; ci.Node != "envoy-1" || ci.Cluster != "edge" {
		t.Fatalf("short node stored as %q/%q", ci.Node, ci.Cluster)
	}
}
