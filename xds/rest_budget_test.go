package xds_test

import (
	"fmt"
	"net/http"
	"runtime"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/xdsbridge/xdsbridge/translate"
	"github.com/xdsbridge/xdsbridge/xds"
)

// restNamesOf is n EDS resource names of width bytes each, from prefix,
// the last of them "a" (the service the tests change).
func restNamesOf(prefix string, n, width int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%0*d", prefix, width-len(prefix), i)
	}
	out[n-1] = "a"
	return out
}

// TestRESTHeldNameBudget: the names of the held polls, together, stay
// within max_held_names and max_held_name_bytes; a poll that would go
// over either is answered 304 at once, with the limit named and counted,
// and one that fits is still held.
func TestRESTHeldNameBudget(t *testing.T) {
	for _, tc := range []struct {
		limit string
		opts  xds.RESTOptions
	}{
		{"max_held_names", xds.RESTOptions{MaxHeldNames: 1000}},
		{"max_held_name_bytes", xds.RESTOptions{MaxHeldNameBytes: 10_000}},
	} {
		t.Run(tc.limit, func(t *testing.T) {
			opts := tc.opts
			opts.MaxWait = 20 * time.Second
			r := newRESTHarness(t, true, opts)
			r.publish([]translate.Resources{svc("a", 1001)})
			// 800 names of 10 bytes: 800 names, 8,000 bytes.
			first := &discovery.DiscoveryRequest{ResourceNames: restNamesOf("a", 800, 10)}
			first.VersionInfo = r.must(200, restEDSPath, first).resp.GetVersionInfo()
			held := make(chan restResult, 2)
			go func() { held <- r.poll(restEDSPath, first) }()
			r.waitHeld(1)
			// 300 more go over both limits.
			over := &discovery.DiscoveryRequest{VersionInfo: first.VersionInfo, ResourceNames: restNamesOf("b", 300, 10)}
			res := r.poll(restEDSPath, over)
			if res.code != http.StatusNotModified || res.took > 5*time.Second {
				t.Fatalf("a poll over %s: %d after %v; want 304 at once", tc.limit, res.code, res.took)
			}
			eq(t, tc.limit+" refusals", 1.0, r.metric("xdsbridge_xds_rest_limit_refusals_total", "limit", tc.limit))
			// 100 more fit under both.
			fits := &discovery.DiscoveryRequest{VersionInfo: first.VersionInfo, ResourceNames: restNamesOf("c", 100, 10)}
			go func() { held <- r.poll(restEDSPath, fits) }()
			r.waitHeld(2)
			r.publish([]translate.Resources{svc("a", 1002)}) // a changes: both polls answer
			for range 2 {
				if res := <-held; res.code != 200 {
					t.Fatalf("held poll: %d %q", res.code, res.body)
				}
			}
			r.waitHeld(0)
			eq(t, tc.limit+" refusals", 1.0, r.metric("xdsbridge_xds_rest_limit_refusals_total", "limit", tc.limit))
		})
	}
}

// TestRESTHeldPollMemory: a held poll keeps about its names' bytes (and 4
// bytes a name), not the decoded request: polls of 60,000 names each
// (a body near max_body_bytes) are held and the heap they add is
// measured. Keeping the decoded request and a string per name costs
// several times the names' bytes.
func TestRESTHeldPollMemory(t *testing.T) {
	const polls, names, width = 3, 60_000, 14
	r := newRESTHarness(t, true, xds.RESTOptions{MaxWait: 5 * time.Minute, MaxBodyBytes: 4 << 20})
	r.hc.Timeout = 0 // the polls are held while the heap is measured
	r.publish([]translate.Resources{svc("a", 1001)})
	req := &discovery.DiscoveryRequest{ResourceNames: restNamesOf("svc-", names, width)}
	req.VersionInfo = r.must(200, restEDSPath, req).resp.GetVersionInfo()
	body, err := protojson.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	req = nil
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	done := make(chan restResult, polls)
	for range polls {
		go func() { done <- r.post(restEDSPath, body) }()
	}
	// Decoding 60,000 names is slow under the race detector on a busy
	// machine: wait longer than waitHeld does.
	for deadline := time.Now().Add(2 * time.Minute); r.metric("xdsbridge_xds_rest_held_polls") != polls; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d held polls (have %v)", polls, r.metric("xdsbridge_xds_rest_held_polls"))
		}
	}
	perPoll := (int64(heap()) - int64(before)) / polls
	packed := int64(names * (width + 4))
	t.Logf("a held poll of %d names (%d-byte body): %d KiB of heap (packed names %d KiB)", names, len(body), perPoll>>10, packed>>10)
	if perPoll > 2*packed {
		t.Errorf("a held poll of %d names takes %d KiB of heap; want at most %d KiB (twice its packed names)", names, perPoll>>10, 2*packed>>10)
	}
	r.publish([]translate.Resources{svc("a", 1002)})
	for range polls {
		if res := <-done; res.code != 200 {
			t.Fatalf("held poll: %d", res.code)
		}
	}
}
