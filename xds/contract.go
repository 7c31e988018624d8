package xds

import (
	"strconv"
	"strings"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
)

// This file holds everything the cache relies on in our xDS stream
// handlers (sotwserver.go and deltaserver.go, adapted from go-control-plane's
// pkg/server/sotw/v3 and pkg/server/delta/v3) beyond the cache.ConfigWatcher
// interface they call the cache through. contract_test.go runs the
// handlers as served (newXDSServer) and fails if a change to either
// changes any of it.
//
//  1. Per-stream state rides in the returned-resources map. For each stream
//     and type the server keeps the map of the last response it sent
//     (DeltaResponse.GetNextVersionMap, Response.GetReturnedResources) and
//     hands it back as Subscription.ReturnedResources with the next watch.
//     The cache keeps its own state there, under keys no resource name can
//     be (names are never empty and never start with NUL), and in values,
//     which the servers never read.
//  2. The delta server sets a response's nonce before it asks for the map
//     (GetDeltaDiscoveryResponse, nonce, OnStreamDeltaResponse, Send, then
//     GetNextVersionMap), and installs the map only for a response it sent.
//     So a state can record the nonce of the response that installed it,
//     and a NACK can be told from the ACK of another response.
//  3. Between responses, the delta server changes the map only on
//     unsubscription: an unsubscribed name is deleted, or, for a wildcard
//     subscription, set to "" (the cache then resends it or reports it
//     removed). The sotw server, for a request that lists names, deletes
//     every entry not among them: state keys survive only wildcard sotw
//     requests, so the sotw state that must survive (what to roll back on
//     a NACK) rides in the values of the names.
//  4. The sotw server ignores a request whose nonce is not the latest
//     response's while that response is unanswered (once it takes a
//     request it takes the next whatever its nonce): a sotw NACK the cache
//     sees is of the latest response, or a late duplicate, which then costs
//     a resend, never a lost update.
//  5. A watch is cancelled before the next watch of its stream and type is
//     created, and a watch is answered at most once. The delta server's
//     response channel holds two responses per type and the sotw ADS
//     channel one per type, so the cache sends under its lock without
//     blocking.
//  6. The delta server processes (installs) the responses queued on a
//     stream before it cancels the watch a new request replaces, and it
//     does both, and creates the next watch, in the stream's goroutine; a
//     response queued after that is installed before any later one. A
//     stream's response channel is shared by its types and is its
//     identity. (The sotw server drops a queued response of the type a new
//     request is for: there the next watch's state is the right one.)

// Keys of the cache's state in a delta stream's returned-resources map.
const (
	// genKey → G: the client holds, of every resource it was interested in
	// at type generation G, the version current at G, and knows that the
	// others do not exist; except the names of restKey, and what the
	// responses under sentPrefix carried if they are rejected. G is
	// followed by wildMark when the client was subscribed to the wildcard.
	genKey   = ""
	wildMark = "w"
	// restKey → sorted names joined by sep: names the client may hold older
	// versions of (the rest of a split response, the content of a rejected
	// response), which the next responses check and send.
	restKey = "\x00rest"
	// limitKey → n,m,...: the sizes of the next responses, while a
	// rejected response is halved to find the resource the client refuses.
	limitKey = "\x00limit"
	// rejectedKey → name sep version pairs: resources the client rejected
	// alone, at that version, which are not sent again at that version.
	rejectedKey = "\x00rejected"
	// sentPrefix + nonce → what the response of that nonce carried: its
	// generation, the number of resources, their names and then the names
	// it removed, joined by sep; kept until the client answers it, so that
	// a NACK puts it back to be sent again.
	sentPrefix = "\x00sent\x00"
)

// sep joins names and versions in state values. Names and versions never
// contain it: versions are hex, and a name with a NUL is not a name the
// cache serves.
const sep = "\x00"

func isStateKey(k string) bool { return k == genKey || (len(k) > 0 && k[0] == 0) }

// deltaResponse is a delta response whose state records the nonce the
// server gave it (contract 2) and what it carried.
type deltaResponse struct {
	cache.DeltaPassthroughResponse
	w    *watch
	sent string // see sentPrefix
	// pred: a response queued before this one whose state this one was
	// computed from before the server installed it (see Cache.cancel); its
	// nonce, and so its record, is known once it is installed.
	pred *deltaResponse
}

// GetNextVersionMap is called by the server when it installs the state,
// in its own goroutine, as is the watch's cancel function (contract 6),
// after the responses queued before (pred among them) were installed.
func (r *deltaResponse) GetNextVersionMap() map[string]string {
	r.w.installed = true
	if nonce := r.DeltaDiscoveryResponse.GetNonce(); nonce != "" && r.sent != "" {
		r.NextVersionMap[sentPrefix+nonce] = r.sent
	}
	if p := r.pred; p != nil {
		// What pred's state recorded once installed (its own record,
		// and those it took over). One the client has answered since is
		// dropped at its next answer.
		for k, v := range p.NextVersionMap {
			if _, ok := r.NextVersionMap[k]; !ok && strings.HasPrefix(k, sentPrefix) {
				r.NextVersionMap[k] = v
			}
		}
		r.pred = nil
	}
	return r.NextVersionMap
}

func (r *deltaResponse) GetReturnedResources() map[string]string { return r.GetNextVersionMap() }

func (r *deltaResponse) GetDeltaDiscoveryResponse() (*discovery.DeltaDiscoveryResponse, error) {
	return r.DeltaDiscoveryResponse, nil
}

// pairs iterates name, version pairs joined by sep.
func pairs(s string, fn func(name, version string)) {
	for s != "" {
		var n, v string
		n, s, _ = strings.Cut(s, sep)
		v, s, _ = strings.Cut(s, sep)
		fn(n, v)
	}
}

// nonceBefore reports whether nonce a was given before b. The servers
// number responses per stream from 1.
func nonceBefore(a, b string) bool {
	x, errx := strconv.ParseUint(a, 10, 64)
	y, erry := strconv.ParseUint(b, 10, 64)
	return errx == nil && erry == nil && x < y
}

// Sotw versions in the returned map (contract 3): a name a response carried
// has "version sep previous sep count" until the client answers; previous
// is what it held before ("" for nothing), restored if the client rejects
// the response, and count the number of resources the response carried. A resource the client rejected alone has "held sep
// rejectedMark version"; a name of a rejected response not sent again yet
// has "held sep limitMark plan" (the sizes of the next responses).
const (
	rejectedMark = "\x01"
	limitMark    = "\x02"
)
