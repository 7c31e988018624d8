package xds

import (
	"unicode/utf8"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protowire"
)

// deltaNonce is the field number of DeltaDiscoveryRequest's response_nonce.
const deltaNonce protowire.Number = 6

// decodeACK decodes b into m if b holds a type URL and a nonce only: an
// ACK, by far the most frequent request (one per response). The fields are
// read here, not by the protobuf runtime, and a type URL the server serves
// is the constant's string, not a copy. It reports false, and leaves m as
// it was, for any other field, a field of another wire type, or a string
// that is not UTF-8: the runtime decodes those (and refuses what it
// refuses). FuzzDecode compares the two.
func decodeACK(b []byte, m *discovery.DeltaDiscoveryRequest) bool {
	var typeURL, nonce []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType {
			return false
		}
		v, k := protowire.ConsumeBytes(b[n:])
		if k < 0 || !utf8.Valid(v) {
			return false
		}
		// A field repeated: the last one is the message's.
		switch num {
		case deltaTypeURL:
			typeURL = v
		case deltaNonce:
			nonce = v
		default:
			return false
		}
		b = b[n+k:]
	}
	m.Reset()
	m.TypeUrl = servedTypeURL(typeURL)
	if len(nonce) > 0 {
		m.ResponseNonce = string(nonce)
	}
	return true
}

// servedTypeURL returns t as a string: the constant of a type the server
// serves, else a copy.
func servedTypeURL(t []byte) string {
	for _, s := range servedTypes {
		if string(t) == s {
			return s
		}
	}
	return string(t)
}
