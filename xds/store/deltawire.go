package store

import (
	"unicode/utf8"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/anypb"
)

// setDelta sets the entry's Any (typeURL, value), its Delta resource and
// Wire, the encoding of Delta's fields, which holds the Any's value: a
// delta response copies each resource's Wire, one run of bytes, instead of
// reading its strings and value where each lies on the heap. Wire is nil if
// the name or version is not UTF-8 (the runtime encodes such a resource,
// and fails).
func (e *Entry) setDelta(typeURL string, value []byte) {
	e.Wire = nil
	if utf8.ValidString(e.Name) && utf8.ValidString(e.Version) && utf8.ValidString(typeURL) {
		anyLen := stringSize(typeURL)
		if len(value) > 0 {
			anyLen += 1 + protowire.SizeBytes(len(value))
		}
		w := make([]byte, 0, stringSize(e.Version)+1+protowire.SizeBytes(anyLen)+stringSize(e.Name))
		w = appendString(w, 1, e.Version)
		w = protowire.AppendTag(w, 2, protowire.BytesType)
		w = protowire.AppendVarint(w, uint64(anyLen))
		w = appendString(w, 1, typeURL)
		if len(value) > 0 {
			w = protowire.AppendTag(w, 2, protowire.BytesType)
			w = protowire.AppendVarint(w, uint64(len(value)))
			off := len(w)
			w = append(w, value...)
			value = w[off:len(w):len(w)]
		}
		e.Wire = appendString(w, 3, e.Name)
	}
	e.Any = &anypb.Any{TypeUrl: typeURL, Value: value}
	e.Delta = &discovery.Resource{Name: e.Name, Version: e.Version, Resource: e.Any}
	e.sizes()
}

// stringSize is the size of a string field of a one-byte tag: none if
// empty (proto3).
func stringSize(s string) int {
	if s == "" {
		return 0
	}
	return 1 + protowire.SizeBytes(len(s))
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}
