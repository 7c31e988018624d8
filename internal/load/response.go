// A delta client's responses, read without the protobuf runtime: in the
// initial sync each of 1,000 clients receives 10,000 resources, and reading
// them into messages through the runtime cost the harness about as much CPU
// as the server spent sending them, on the same cores. Every 64th response
// is also read by the runtime and compared (checkDeltaResponse), so the
// harness still notices a response the runtime would read differently.

package load

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"unsafe"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// DeltaDiscoveryResponse's fields the clients read, a Resource's and an
// Any's (a request's are with the resume requests', resume.go).
const (
	respResources protowire.Number = 2
	respTypeURL   protowire.Number = 4
	respNonce     protowire.Number = 5
	respRemoved   protowire.Number = 6
	resVersion    protowire.Number = 1
	resResource   protowire.Number = 2
	resName       protowire.Number = 3
	anyValue      protowire.Number = 2
)

// checkEvery: one response in this many is also read by the protobuf
// runtime and compared.
const checkEvery = 64

// deltaResponse is what a delta client reads of a response. Its byte
// slices point into raw, the response's bytes; its versions are shared
// between the clients (fleet.version), as every client holds the same.
type deltaResponse struct {
	raw       []byte
	typeURL   []byte
	nonce     string
	resources []deltaResource
	removed   [][]byte
}

type deltaResource struct {
	name    []byte
	svc     int // of the name; -1 if it names no service
	version string
	value   []byte // the Any's value: the resource's encoding
}

var errMalformed = errors.New("malformed delta response")

// read parses b (which r keeps until release) into r; fl holds the
// versions the clients share.
func (r *deltaResponse) read(b []byte, fl *fleet) error {
	*r = deltaResponse{raw: b, resources: r.resources[:0], removed: r.removed[:0]}
	ok := eachBytesField(b, func(num protowire.Number, v []byte) bool {
		switch num {
		case respResources:
			res, ok := readResource(v)
			r.resources = append(r.resources, res)
			return ok
		case respTypeURL:
			r.typeURL = v
		case respNonce:
			r.nonce = string(v)
		case respRemoved:
			r.removed = append(r.removed, v)
		}
		return true
	})
	if !ok {
		return errMalformed
	}
	// The versions, once the type is known.
	kind := fl.cdsVersions
	if string(r.typeURL) == edsType {
		kind = fl.edsVersions
	}
	for i := range r.resources {
		res := &r.resources[i]
		res.svc = svcIndexOf(res.name)
		res.version = kind.get(res.svc, res.version)
	}
	return nil
}

// readResource reads a Resource, and false if it is malformed; its
// version is a copy, which read swaps for the fleet's.
func readResource(b []byte) (deltaResource, bool) {
	var res deltaResource
	var version []byte
	ok := eachBytesField(b, func(num protowire.Number, v []byte) bool {
		switch num {
		case resName:
			res.name = v
		case resVersion:
			version = v
		case resResource:
			// An Any in parts is one Any (the runtime merges them): a
			// part without a value keeps the value before it.
			value, ok := anyValueOf(v)
			if value != nil {
				res.value = value
			}
			return ok
		}
		return true
	})
	res.version = unsafe.String(unsafe.SliceData(version), len(version))
	return res, ok
}

// anyValueOf is an Any's value field (the last one, as the runtime reads
// it; nil if it has none), and false if the Any is malformed.
func anyValueOf(b []byte) ([]byte, bool) {
	var value []byte
	ok := eachBytesField(b, func(num protowire.Number, v []byte) bool {
		if num == anyValue {
			value = v
		}
		return true
	})
	return value, ok
}

// eachBytesField calls fn with each length-delimited field of message b,
// in order, skipping the others; false if b is malformed or fn said so.
func eachBytesField(b []byte, fn func(num protowire.Number, v []byte) bool) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return false
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 || !fn(num, v) {
			return false
		}
		b = b[n:]
	}
	return true
}

// release drops what r refers to (an idle client would otherwise keep its
// initial state's bytes), keeping small slices for the next response.
func (r *deltaResponse) release() {
	clear(r.resources)
	clear(r.removed)
	res, removed := r.resources[:0], r.removed[:0]
	if cap(res) > 64 {
		res = nil
	}
	if cap(removed) > 64 {
		removed = nil
	}
	*r = deltaResponse{resources: res, removed: removed}
}

// check reads r.raw with the protobuf runtime and reports where the two
// readings differ.
func (r *deltaResponse) check() error {
	var m discovery.DeltaDiscoveryResponse
	if err := proto.Unmarshal(r.raw, &m); err != nil {
		return fmt.Errorf("delta response: the runtime cannot read it: %w", err)
	}
	switch {
	case m.GetTypeUrl() != string(r.typeURL):
		return fmt.Errorf("delta response: type %q, the runtime reads %q", r.typeURL, m.GetTypeUrl())
	case m.GetNonce() != r.nonce:
		return fmt.Errorf("delta response: nonce %q, the runtime reads %q", r.nonce, m.GetNonce())
	case !slices.EqualFunc(m.GetRemovedResources(), r.removed, func(a string, b []byte) bool { return a == string(b) }):
		return fmt.Errorf("delta response: removed %q, the runtime reads %q", r.removed, m.GetRemovedResources())
	case len(m.GetResources()) != len(r.resources):
		return fmt.Errorf("delta response: %d resources, the runtime reads %d", len(r.resources), len(m.GetResources()))
	}
	for i, res := range m.GetResources() {
		got := r.resources[i]
		if res.GetName() != string(got.name) || res.GetVersion() != got.version || string(res.GetResource().GetValue()) != string(got.value) {
			return fmt.Errorf("delta response: resource %d is %q version %q, the runtime reads %q version %q (or another value)",
				i, got.name, got.version, res.GetName(), res.GetVersion())
		}
	}
	return nil
}

// appendACK appends a DeltaDiscoveryRequest ACKing nonce of typeURL.
func appendACK(b []byte, typeURL string, nonce string) []byte {
	if b == nil {
		b = make([]byte, 0, 4+len(typeURL)+len(nonce))
	}
	b = protowire.AppendTag(b, fieldTypeURL, protowire.BytesType)
	b = protowire.AppendString(b, typeURL)
	b = protowire.AppendTag(b, fieldNonce, protowire.BytesType)
	return protowire.AppendString(b, nonce)
}

// versionTable holds, by service, the last version of one type the
// clients read, to share: 1,000 clients holding 10,000 versions each would
// otherwise hold ten million copies.
type versionTable []atomic.Pointer[string]

// get returns the table's string equal to v (which may point into a
// response's bytes) for service svc, storing a copy if it has none.
func (t versionTable) get(svc int, v string) string {
	if svc < 0 || svc >= len(t) {
		return strings.Clone(v)
	}
	if p := t[svc].Load(); p != nil && *p == v {
		return *p
	}
	c := strings.Clone(v)
	t[svc].Store(&c)
	return c
}

// svcIndexOf is svcIndex of a name's bytes.
func svcIndexOf(b []byte) int {
	const prefix = "svc-"
	if len(b) <= len(prefix) || len(b) > len(prefix)+9 || string(b[:len(prefix)]) != prefix {
		return -1
	}
	n := 0
	for _, c := range b[len(prefix):] {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// rawResponse receives a response's bytes as they are (rawCodec).
type rawResponse struct{ b []byte }

// Unmarshal copies a rawResponse's bytes (gRPC reuses data's buffers), and
// reads anything else with the protobuf runtime.
func (c rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*rawResponse); ok {
		r.b = data.Materialize()
		return nil
	}
	return c.CodecV2.Unmarshal(data, v)
}
