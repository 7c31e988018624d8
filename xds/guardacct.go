package xds

import (
	"context"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// One stream's accounting of the limits: pacing, the names per type,
// and the stream's, connection's and server's totals.

// streamAcct is one stream's accounting. pace is called only from the
// stream's receiving goroutine; check too, but it can run after the
// handler returned (the handler's receiving goroutine outlives it),
// so check and release hold mu.
type streamAcct struct {
	g    *guard
	conn *connAcct
	ctx  context.Context // the stream's
	end  func()          // releases the stream, once
	// charges: the stream's responses' bytes in the unwritten budget,
	// given back when it ends (unwritten.go).
	charges streamCharges

	// defType: the type of a stream of one type (DeltaEndpoints, ...),
	// which the server gives a request without a type URL; nil for ADS.
	defType []byte

	mu       sync.Mutex
	types    byType[*typeNames]
	released bool
	err      error // the limit the stream went over
	// resumeHeld: places the stream holds in the resume gate
	// (resumegate.go), given back when it ends.
	resumeHeld int
	// resumed: what the decoder found current of the initial versions of
	// requests decoded and not yet handled (resumed.go).
	resumed map[*discovery.DeltaDiscoveryRequest]*resumedVersions
	// repeat: the names of the request being decoded, when they are its
	// type's last request's (guardsotw.go); set by the accounting, taken
	// by the decoder.
	repeat []string

	// names and bytes are the stream's totals, also in conn's; read by
	// Server.Clients.
	names, bytes atomic.Int64
	// ivBytes are the bytes of the initial_resource_versions held (see
	// apply), in their own per-connection budget, max_name_bytes_total
	// and the memory estimate.
	ivBytes atomic.Int64

	// The token bucket pacing requests.
	tokens float64
	last   time.Time
}

// typeNames is one type's subscribed names (their hashes), their bytes,
// and the bytes of the type's last request that are not names.
type typeNames struct {
	// set: the hashes of the names subscribed (a name's size is its
	// length, read again from an unsubscription); shared between the
	// streams subscribed to the same names (nameset.go).
	set   *hashSet
	bytes int
	other int
	// The bytes of the initial_resource_versions of the type's first
	// request (held for the stream's life: the cache may keep what it
	// answered them with, a removal per name it does not serve, until the
	// client ACKs) and of its last request (held until the next).
	ivFirst, ivLast int
	requests        int
	// A sotw type's last request: its names as decoded (nil: unknown),
	// never written once kept, and the bytes of those it repeated
	// (guardsotw.go).
	list  []string
	extra int
}

// pace takes a token from the stream's bucket, waiting for it if there is
// none: a stream sending faster than RequestsPerSecond is read that fast.
func (a *streamAcct) pace(ctx context.Context) error {
	rps := a.g.lim.RequestsPerSecond
	// One read of the monotonic clock (time.Since), not of both clocks.
	elapsed := time.Since(a.last)
	a.tokens = min(float64(a.g.lim.RequestBurst), a.tokens+elapsed.Seconds()*rps)
	a.last = a.last.Add(elapsed)
	a.tokens--
	if a.tokens >= 0 {
		return nil
	}
	a.g.m.delayed.Inc()
	t := time.NewTimer(time.Duration(-a.tokens / rps * float64(time.Second)))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

// checkWire applies one encoded request (b, about to be decoded into m) to
// the accounting, and returns the error of the first limit it goes over,
// which is also the stream's error. It reads the wire format itself, so
// that a request over a limit is never decoded, and allocates nothing but
// map entries.
func (a *streamAcct) checkWire(m any, b []byte) error { return a.checkWireScan(m, b, nil) }

// checkWireScan is checkWire, and gives the decoder what its pass over a
// delta request found (sc, if not nil; sc.valid: scanned), so that the
// decoder need not read the request once more to find it.
func (a *streamAcct) checkWireScan(m any, b []byte, sc *deltaScan) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return a.err
	}
	if a.released {
		return status.Error(codes.Canceled, "stream ended")
	}
	var delta bool
	switch m.(type) {
	case *discovery.DeltaDiscoveryRequest:
		delta = true
	case *discovery.DiscoveryRequest:
	default:
		return nil
	}
	a.repeat = nil
	a.err = a.apply(delta, b, sc)
	return a.err
}

// Field numbers of DeltaDiscoveryRequest and DiscoveryRequest.
const (
	deltaNode, deltaTypeURL, deltaSubscribe, deltaUnsubscribe, deltaInitialVersions protowire.Number = 1, 2, 3, 4, 5
	sotwNode, sotwResourceNames, sotwTypeURL                                        protowire.Number = 2, 3, 4
)

// fields calls fn with each length-delimited field of b, and the bytes it
// takes (tag and length included); false if b is not well formed (the
// decoder then refuses it).
func fields(b []byte, fn func(num protowire.Number, v []byte, size int)) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		if typ != protowire.BytesType {
			m := protowire.ConsumeFieldValue(num, typ, b[n:])
			if m < 0 {
				return false
			}
			b = b[n+m:]
			continue
		}
		v, m := protowire.ConsumeBytes(b[n:])
		if m < 0 {
			return false
		}
		fn(num, v, n+m)
		b = b[n+m:]
	}
	return true
}

func (a *streamAcct) apply(delta bool, b []byte, sc *deltaScan) error {
	var sp *[]subName
	if delta {
		sp = subNamesPool.Get().(*[]subName)
		defer subNamesPool.Put(sp)
	}
	return a.applyRequest(delta, b, sc, sp)
}

// requestFields is what the first pass over a request finds: the type,
// the node's size, the names' and initial versions' bytes and counts.
type requestFields struct {
	typeURL               []byte
	nodeBytes, namesBytes int
	ivBytes               int
	subs, unsubs, entries int
}

// firstPass reads b's fields; with subs (a delta request), it hashes
// its first maxSubs subscriptions into *subs too. false: b is not well
// formed.
func firstPass(delta bool, b []byte, seed maphash.Seed, subs *[]subName, maxSubs int) (requestFields, bool) {
	nodeField, typeField, namesField := sotwNode, sotwTypeURL, sotwResourceNames
	if delta {
		nodeField, typeField, namesField = deltaNode, deltaTypeURL, deltaSubscribe
	}
	var r requestFields
	ok := fields(b, func(num protowire.Number, v []byte, size int) {
		switch {
		case num == nodeField:
			r.nodeBytes += len(v)
		case num == typeField:
			r.typeURL = v // the last one counts
		case num == namesField:
			r.namesBytes += size
			r.subs++
			if subs != nil && len(*subs) < maxSubs {
				*subs = append(*subs, subName{maphash.Bytes(seed, v), len(v), size})
			}
		case delta && num == deltaUnsubscribe:
			r.namesBytes += size
			r.unsubs++
		case delta && num == deltaInitialVersions:
			r.ivBytes += size
			r.entries++
		}
	})
	return r, ok
}

// applyRequest is apply, with a list for the subscriptions of a delta
// request (sp).
func (a *streamAcct) applyRequest(delta bool, b []byte, sc *deltaScan, sp *[]subName) error {
	lim := a.g.lim
	// First pass: the type, the node's size, and the bytes that are not
	// names (the server holds a type's last request until its next); a
	// delta request's subscriptions, hashed, for deltaNames.
	if sp != nil {
		*sp = (*sp)[:0]
	}
	r, ok := firstPass(delta, b, a.g.seed, sp, a.g.subsHashed)
	if !ok {
		return nil
	}
	typeURL, nodeBytes, namesBytes, ivBytes := r.typeURL, r.nodeBytes, r.namesBytes, r.ivBytes
	subs, unsubs, entries := r.subs, r.unsubs, r.entries
	if delta && sc != nil {
		// What scanDelta finds, from the same pass.
		*sc = deltaScan{subs: subs, unsubs: unsubs, entries: entries, other: len(b) - namesBytes - ivBytes, typeURL: typeURL, valid: true}
	}
	if len(typeURL) == 0 {
		// The server serves it as the stream's type: its names are that
		// type's, not another type's.
		typeURL = a.defType
	}
	// initial_resource_versions (a reconnecting client's state) are not
	// subscribed names: the delta handler uses them for the type's first
	// response only. But the cache may keep what it answered them with (a
	// removal for each name it does not serve) until the client ACKs, and
	// a later request's are held with it until the next. So, of a type
	// served, they are held apart (ivBytes): the first request's for the
	// stream's life, the last request's until the next, counted in their
	// own per-connection budget (max_initial_version_bytes_per_connection)
	// and in max_name_bytes_total. A client reconnecting with its state
	// passes the names limits exactly where a fresh one does. Of a type
	// not served, they count as the request's other bytes.
	tu := unsafe.String(unsafe.SliceData(typeURL), len(typeURL)) // no copy: not kept
	if servedType(tu) == "other" {
		ivBytes = 0
	}
	if nodeBytes > lim.MaxNodeBytes {
		return a.g.limitError(codes.InvalidArgument, "max_node_bytes", lim.MaxNodeBytes, "the request's node is %d bytes encoded", nodeBytes)
	}
	tn := a.types.at(tu)
	dn, db := 0, 0
	if tn == nil {
		tn = &typeNames{set: hashSets.empty}
		a.types.set(string(typeURL), tn)
		dn = 1
	}
	tn.requests++
	var div int
	if tn.requests == 1 {
		div, tn.ivFirst = ivBytes, ivBytes
	} else {
		div, tn.ivLast = ivBytes-tn.ivLast, ivBytes
	}

	// extra: the bytes of the names that change no subscription (a name
	// repeated, one subscribed already, an unsubscription of a name not
	// subscribed); the request holds them all the same, so they count as
	// its other bytes.
	var ddn, ddb, extra int
	if delta {
		sl := subList{hashed: *sp, walk: subs > len(*sp), b: b, seed: a.g.seed}
		ddn, ddb, extra = a.deltaNames(tn, b, sl, subs, unsubs)
	} else {
		ddn, ddb, extra = a.sotwNames(tn, b)
	}
	other := len(b) - namesBytes - ivBytes + extra
	db += other - tn.other
	tn.other = other
	dn, db = dn+ddn, db+ddb
	if dn == 0 && db == 0 && div == 0 {
		return nil
	}
	return a.account(string(typeURL), tn, dn, db, div)
}

// deltaNames applies a delta request's subscriptions, then its
// unsubscriptions, as the delta handler applies them, to the type's set; the
// set is derived once (none for a request without names, the common ACK).
// It returns the change in names and bytes, and the bytes (as encoded) of
// the names that changed nothing. subs are the request's subscriptions
// (hashed), nsubs and unsubs its subscriptions and unsubscriptions,
// counted.
func (a *streamAcct) deltaNames(tn *typeNames, b []byte, subs subList, nsubs, unsubs int) (dn, db, extra int) {
	if nsubs == 0 && unsubs == 0 {
		return 0, 0, 0
	}
	if unsubs == 0 {
		if dn, db, extra, ok := a.subscribeOnly(tn, subs, nsubs); ok {
			return dn, db, extra
		}
	}
	var adds, rems []uint64
	var added, removed map[uint64]struct{}
	for s := range subs.all() {
		if tn.set.has(s.h) {
			extra += s.size
			continue
		}
		if added == nil {
			added = map[uint64]struct{}{}
		}
		if _, ok := added[s.h]; ok {
			extra += s.size
			continue
		}
		added[s.h] = struct{}{}
		adds = append(adds, s.h)
		tn.bytes += s.n
		dn++
		db += s.n
	}
	fields(b, func(num protowire.Number, v []byte, size int) {
		if num != deltaUnsubscribe {
			return
		}
		h := maphash.Bytes(a.g.seed, v)
		if _, ok := removed[h]; ok {
			extra += size
			return
		}
		if _, ok := added[h]; !ok && !tn.set.has(h) {
			extra += size
			return
		}
		if removed == nil {
			removed = map[uint64]struct{}{}
		}
		removed[h] = struct{}{}
		rems = append(rems, h)
		tn.bytes -= len(v)
		dn--
		db -= len(v)
	})
	if len(adds)+len(rems) > 0 {
		tn.set = tn.set.derive(adds, rems)
	}
	return dn, db, extra
}

// account adds a request's change in names (dn), bytes (db) and initial
// version bytes (div) to the stream's, its connection's and the server's
// totals, and returns the error of the first limit they pass.
func (a *streamAcct) account(typeURL string, tn *typeNames, dn, db, div int) error {
	lim := a.g.lim
	a.ivBytes.Add(int64(div))
	names := a.names.Add(int64(dn))
	bytes := a.bytes.Add(int64(db))
	a.conn.mu.Lock()
	a.conn.names += dn
	a.conn.bytes += db
	a.conn.ivBytes += div
	cn, cb, civ := a.conn.names, a.conn.bytes, a.conn.ivBytes
	a.conn.mu.Unlock()
	total := a.g.bytes.Add(int64(db + div))
	if tn.set.len() > lim.MaxNamesPerStream {
		t, _ := bound(typeURL, "", MaxClientStringBytes)
		return a.g.limitError(codes.ResourceExhausted, "max_names_per_stream", lim.MaxNamesPerStream,
			"the stream subscribed to %d names of %s", tn.set.len(), t)
	}
	switch {
	case bytes > int64(lim.MaxNameBytesPerStream):
		return a.g.limitError(codes.ResourceExhausted, "max_name_bytes_per_stream", lim.MaxNameBytesPerStream,
			"the stream subscribed to %d bytes of names and requests held", bytes)
	case cn > lim.MaxNamesPerConnection:
		return a.g.limitError(codes.ResourceExhausted, "max_names_per_connection", lim.MaxNamesPerConnection,
			"the connection's streams subscribed to %d names (this stream %d)", cn, names)
	case cb > lim.MaxNameBytesPerConnection:
		return a.g.limitError(codes.ResourceExhausted, "max_name_bytes_per_connection", lim.MaxNameBytesPerConnection,
			"the connection's streams subscribed to %d bytes of names and requests held (this stream %d)", cb, bytes)
	case civ > lim.MaxInitialVersionBytesPerConnection:
		return a.g.limitError(codes.ResourceExhausted, "max_initial_version_bytes_per_connection", lim.MaxInitialVersionBytesPerConnection,
			"the connection's streams sent %d bytes of initial_resource_versions", civ)
	case total > int64(lim.MaxNameBytesTotal):
		return a.g.limitError(codes.ResourceExhausted, "max_name_bytes_total", lim.MaxNameBytesTotal,
			"the server's streams subscribed to %d bytes of names and requests held (this stream %d)", total, bytes)
	}
	return nil
}

// limitErr is the limit the stream went over, if any.
func (a *streamAcct) limitErr() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// release takes the stream's names off its connection's accounting (once:
// later calls find nothing to take off), and returns the limit the stream
// went over, if any.
func (a *streamAcct) release() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.released = true
	for ; a.resumeHeld > 0; a.resumeHeld-- {
		a.g.resumes.leave()
	}
	n, b, iv := a.names.Swap(0), a.bytes.Swap(0), a.ivBytes.Swap(0)
	a.conn.mu.Lock()
	a.conn.names -= int(n)
	a.conn.bytes -= int(b)
	a.conn.ivBytes -= int(iv)
	a.conn.mu.Unlock()
	a.g.bytes.Add(-b - iv)
	a.types = byType[*typeNames]{}
	a.resumed = nil
	return a.err
}

// keepResumed keeps r, what the decoder found current of req's initial
// versions, until the stream's handler takes it.
func (a *streamAcct) keepResumed(req *discovery.DeltaDiscoveryRequest, r *resumedVersions) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.released {
		return
	}
	if a.resumed == nil {
		a.resumed = map[*discovery.DeltaDiscoveryRequest]*resumedVersions{}
	}
	a.resumed[req] = r
}

// takeResumed returns what the decoder found current of req's initial
// versions (nil: none, or a is nil), and forgets it.
func (a *streamAcct) takeResumed(req *discovery.DeltaDiscoveryRequest) *resumedVersions {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.resumed[req]
	delete(a.resumed, req)
	return r
}

// The per-client memory estimate (memory_estimate_bytes in /debug/clients)
// of a stream is
//
//	PerStreamOverheadBytes + NameBytesFactor × name bytes + PerNameOverheadBytes × names
//
// with the names and their bytes as the limits count them. The constants
// are measured by TestMeasurePerNameOverhead (XDSBRIDGE_ABUSE_MEASURE=1, a
// server in a child process): its live heap plus goroutine stacks after
// two GCs, with 16 delta streams each subscribed to 20,000 made-up 16-byte
// names, then to 1,900 made-up 1,000-byte names, minus the same before;
// and with 1,000 streams subscribed to nothing. Measured (go 1.26,
// go-control-plane 0.14): 106 bytes per 16-byte name, 2,121 per 1,000-byte
// name, i.e. 2.05 × the name's bytes + 74; 23,150 bytes per stream (22,500
// before the guard tracked live streams for max_streams, on the same machine).
//
// The names are held twice: the request's strings (the delta server's
// subscription set and the cache's watch of the request share them) and the
// cache's record of the response that answered them. The rest per name is
// the subscription set's map entry, the request's string header and the
// guard's hash set entry. (Made-up names are the stream's own: the shared
// sets of nameset.go save nothing on them, and the estimate counts no
// sharing.) A sotw stream also keeps, per type, the string headers of its
// last request's names (guardsotw.go), 16 bytes a name.
const (
	PerStreamOverheadBytes = 23 << 10
	NameBytesFactor        = 2
	PerNameOverheadBytes   = 75
)

// memoryEstimate is the stream's estimated cost in bytes.
func (a *streamAcct) memoryEstimate() int64 {
	return PerStreamOverheadBytes + NameBytesFactor*(a.bytes.Load()+a.ivBytes.Load()) + a.names.Load()*PerNameOverheadBytes
}

// streamTypeURL is the type the server gives the requests without a type
// URL of a stream of one type (the handlers of
// DeltaEndpoints, StreamClusters, ...), by its gRPC method; nil for ADS.
func streamTypeURL(method string) []byte {
	svc, _, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	switch svc {
	case "envoy.service.cluster.v3.ClusterDiscoveryService":
		return []byte(ClusterType)
	case "envoy.service.endpoint.v3.EndpointDiscoveryService":
		return []byte(EndpointType)
	case "envoy.service.listener.v3.ListenerDiscoveryService":
		return []byte(ListenerType)
	case "envoy.service.route.v3.RouteDiscoveryService":
		return []byte(RouteType)
	}
	return nil
}
