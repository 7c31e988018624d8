// The floor's streams (baseline_floor.go): per type a subscription, the
// response in flight and the names changed since; requests read, ACKs
// without the protobuf runtime; responses assembled from the resources'
// encodings.

package load

import (
	"errors"
	"io"
	"slices"
	"sync"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// floorStream is one ADS stream of the floor. Its handler goroutine
// (serve) and the applier (changed) send on it, one at a time (mu).
type floorStream struct {
	f     *floor
	delta bool
	st    grpc.ServerStream

	mu    sync.Mutex
	done  bool // the handler returned: send nothing more
	nonce uint64
	t     [floorTypes]floorSub
}

// floorSub is a stream's state of one type.
type floorSub struct {
	asked    bool // a request of the type came
	wildcard bool
	subs     bits     // by service
	names    []string // sotw: the names of the last request, to tell its ACKs
	inflight uint64   // the nonce of the response not yet answered; 0: none
	last     uint64   // sotw: the nonce of the last response sent; 0: none
	// pending are the services changed (or subscribed to) since the
	// response in flight, each once (marked).
	pending []int
	marked  bits
	// answer: a sotw request to answer even with nothing pending.
	answer bool
}

func (t *floorSub) follows(svc int) bool { return t.wildcard || t.subs.get(svc) }

func (t *floorSub) mark(svc int) {
	if !t.marked.get(svc) {
		t.marked.set(svc)
		t.pending = append(t.pending, svc)
	}
}

// bits is a set of services.
type bits []uint64

func newBits(n int) bits         { return make(bits, (n+63)/64) }
func (b bits) get(i int) bool    { return b[i/64]&(1<<(i%64)) != 0 }
func (b bits) set(i int)         { b[i/64] |= 1 << (i % 64) }
func (b bits) clear(i int)       { b[i/64] &^= 1 << (i % 64) }
func floorTypeOf(url []byte) int { return floorTypeOfString(string(url)) }

func floorTypeOfString(url string) int {
	for t, u := range floorTypeURLs {
		if url == u {
			return t
		}
	}
	return -1
}

// serve is a stream's handler: it reads the requests and sends what they
// call for, until the stream ends.
func (f *floor) serve(st grpc.ServerStream, delta bool) error {
	s := &floorStream{f: f, delta: delta, st: st}
	for t := range s.t {
		s.t[t].subs, s.t[t].marked = newBits(len(f.names)), newBits(len(f.names))
	}
	f.register(s)
	defer func() {
		f.unregister(s)
		s.mu.Lock()
		s.done = true
		s.mu.Unlock()
	}()
	var req floorRequest
	for {
		if err := st.RecvMsg(&req); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		s.mu.Lock()
		err := s.request(req.b)
		s.mu.Unlock()
		if err != nil {
			return err
		}
		// Keep a buffer for ACKs, not a subscription's.
		if cap(req.b) > 4096 {
			req.b = nil
		}
	}
}

// request handles one request (s.mu held).
func (s *floorStream) request(b []byte) error {
	if s.delta {
		if t, nonce, ok := floorDeltaACK(b); ok {
			s.acked(t, nonce)
			return s.flush(t)
		}
		var m discovery.DeltaDiscoveryRequest
		if err := proto.Unmarshal(b, &m); err != nil {
			return err
		}
		t := floorTypeOfString(m.GetTypeUrl())
		if t < 0 {
			return nil
		}
		sub := &s.t[t]
		if m.GetResponseNonce() != "" {
			s.acked(t, []byte(m.GetResponseNonce()))
		}
		first := !sub.asked
		sub.asked = true
		if first && len(m.GetResourceNamesSubscribe()) == 0 {
			s.subscribeAll(sub)
		}
		sub.pending = slices.Grow(sub.pending, len(m.GetResourceNamesSubscribe()))
		for _, n := range m.GetResourceNamesSubscribe() {
			if n == "*" {
				s.subscribeAll(sub)
			} else if i, ok := s.f.index[n]; ok {
				// Again if subscribed: the client may have forgotten it.
				sub.subs.set(i)
				sub.mark(i)
			}
		}
		for _, n := range m.GetResourceNamesUnsubscribe() {
			if n == "*" {
				sub.wildcard = false
			} else if i, ok := s.f.index[n]; ok {
				sub.subs.clear(i)
			}
		}
		return s.flush(t)
	}
	if t, nonce, ok := s.sotwACK(b); ok {
		s.acked(t, nonce)
		return s.flush(t)
	}
	var m discovery.DiscoveryRequest
	if err := proto.Unmarshal(b, &m); err != nil {
		return err
	}
	t := floorTypeOfString(m.GetTypeUrl())
	if t < 0 {
		return nil
	}
	sub := &s.t[t]
	if m.GetResponseNonce() != "" {
		if !nonceIs([]byte(m.GetResponseNonce()), sub.last) {
			return nil // stale: answered by the response in flight
		}
		sub.inflight = 0
	}
	first := !sub.asked
	sub.asked = true
	// A NACK, or a request the ACK reader left to the runtime, with the
	// same names is answered as an ACK is: by what is pending.
	sub.answer = sub.answer || first || !slices.Equal(sub.names, m.GetResourceNames())
	if len(m.GetResourceNames()) == 0 && (first || sub.wildcard) {
		if first {
			s.subscribeAll(sub)
		}
	} else {
		sub.wildcard = false
		was := sub.subs
		sub.subs = newBits(len(s.f.names))
		for _, n := range m.GetResourceNames() {
			if i, ok := s.f.index[n]; ok {
				sub.subs.set(i)
				if !was.get(i) {
					sub.mark(i)
				}
			}
		}
	}
	sub.names = m.GetResourceNames()
	return s.flush(t)
}

func (s *floorStream) subscribeAll(sub *floorSub) {
	sub.wildcard = true
	sub.pending = slices.Grow(sub.pending, len(s.f.names))
	for i := range s.f.names {
		sub.mark(i)
	}
}

// acked notes the answer to the response nonce of type t, if that is the
// one in flight (s.mu held).
func (s *floorStream) acked(t int, nonce []byte) {
	if sub := &s.t[t]; sub.inflight != 0 && nonceIs(nonce, sub.inflight) {
		sub.inflight = 0
	}
}

// changed offers a batch of changed services, by type, to the stream: a
// type with nothing in flight is sent them now (the applier calls it).
func (s *floorStream) changed(changed *[floorTypes][]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for t := range changed {
		sub := &s.t[t]
		if !sub.asked {
			continue
		}
		follows := false
		for _, i := range changed[t] {
			if sub.follows(i) {
				sub.mark(i)
				follows = true
			}
		}
		if follows {
			// An error ends the stream; its handler sees it.
			_ = s.flush(t)
		}
	}
}

// flush sends type t's pending resources the stream follows, unless a
// response of the type is in flight (s.mu held). A sotw CDS response is
// every cluster followed (the full state); a sotw request is answered
// even with nothing to send.
func (s *floorStream) flush(t int) error {
	sub := &s.t[t]
	if s.done || sub.inflight != 0 || len(sub.pending) == 0 && !(sub.answer && !s.delta) {
		return nil
	}
	res := s.f.res[t]
	out := make(mem.BufferSlice, 1, 1+len(sub.pending))
	add := func(i int) {
		if r := res[i].Load(); r != nil {
			if s.delta {
				out = append(out, r.delta)
			} else {
				out = append(out, r.sotw)
			}
		}
	}
	if !s.delta && t == floorCDS {
		for i := range s.f.names {
			if sub.follows(i) {
				add(i)
			}
		}
	}
	for _, i := range sub.pending {
		sub.marked.clear(i)
		if sub.follows(i) && (s.delta || t != floorCDS) {
			add(i)
		}
	}
	// Keep a small list for the next changes, not the first response's.
	if cap(sub.pending) > 256 {
		sub.pending = nil
	} else {
		sub.pending = sub.pending[:0]
	}
	if len(out) == 1 && !(sub.answer && !s.delta) {
		return nil
	}
	sub.answer = false
	s.nonce++
	sub.inflight, sub.last = s.nonce, s.nonce
	url := floorTypeURLs[t]
	h := make([]byte, 0, 2*len(url)+32)
	if s.delta {
		h = protowire.AppendTag(h, deltaRespTypeURL, protowire.BytesType)
		h = protowire.AppendString(h, url)
		h = protowire.AppendTag(h, deltaRespNonce, protowire.BytesType)
		h = appendDecimal(h, s.nonce)
	} else {
		// The version is the nonce: a sotw response is a version of
		// what the stream follows.
		h = protowire.AppendTag(h, sotwRespVersion, protowire.BytesType)
		h = appendDecimal(h, s.nonce)
		h = protowire.AppendTag(h, sotwRespTypeURL, protowire.BytesType)
		h = protowire.AppendString(h, url)
		h = protowire.AppendTag(h, sotwRespNonce, protowire.BytesType)
		h = appendDecimal(h, s.nonce)
	}
	out[0] = mem.SliceBuffer(h)
	return s.st.SendMsg(out)
}

// appendDecimal appends n in decimal as a length-delimited value.
func appendDecimal(b []byte, n uint64) []byte {
	var d [20]byte
	k := len(d)
	for {
		k--
		d[k] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			break
		}
	}
	return protowire.AppendBytes(b, d[k:])
}

// nonceIs reports whether nonce is n in decimal.
func nonceIs(nonce []byte, n uint64) bool {
	if len(nonce) == 0 || len(nonce) > 20 {
		return false
	}
	var v uint64
	for _, c := range nonce {
		if c < '0' || c > '9' {
			return false
		}
		v = v*10 + uint64(c-'0')
	}
	return v == n
}

// floorDeltaACK reads a DeltaDiscoveryRequest that is an ACK (or a
// request without names): a type URL the floor serves and a nonce, no
// other field; false for anything else.
func floorDeltaACK(b []byte) (t int, nonce []byte, ok bool) {
	t = -1
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType {
			return 0, nil, false
		}
		v, k := protowire.ConsumeBytes(b[n:])
		if k < 0 {
			return 0, nil, false
		}
		switch num {
		case deltaReqTypeURL:
			t = floorTypeOf(v)
		case deltaReqResponseNonce:
			nonce = v
		default:
			return 0, nil, false
		}
		b = b[n+k:]
	}
	return t, nonce, t >= 0 && len(nonce) > 0
}

// sotwACK reads a DiscoveryRequest that is an ACK: a version, the names
// of the stream's last request of the type, in its order, a type URL the
// floor serves and a nonce, no other field; false for anything else.
func (s *floorStream) sotwACK(b []byte) (t int, nonce []byte, ok bool) {
	t, names := -1, 0
	for rest := b; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 || typ != protowire.BytesType {
			return 0, nil, false
		}
		v, k := protowire.ConsumeBytes(rest[n:])
		if k < 0 {
			return 0, nil, false
		}
		switch num {
		case sotwReqVersion:
		case sotwReqResourceNames:
			names++
		case sotwReqTypeURL:
			t = floorTypeOf(v)
		case sotwReqResponseNonce:
			nonce = v
		default:
			return 0, nil, false
		}
		rest = rest[n+k:]
	}
	if t < 0 || len(nonce) == 0 || !s.t[t].asked || names != len(s.t[t].names) {
		return 0, nil, false
	}
	want := s.t[t].names
	for len(b) > 0 {
		num, _, n := protowire.ConsumeTag(b)
		v, k := protowire.ConsumeBytes(b[n:])
		if num == sotwReqResourceNames {
			if string(v) != want[0] {
				return 0, nil, false
			}
			want = want[1:]
		}
		b = b[n+k:]
	}
	return t, nonce, true
}
