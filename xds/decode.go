package xds

import (
	"errors"
	"unicode/utf8"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// decodeDeltaRequest decodes b into m as proto.Unmarshal does, with one
// difference in how: initial_resource_versions is decoded here, into a map
// made at its size. The protobuf runtime decodes a map field through
// reflection, one entry at a time, into a map that grows as it goes; an
// Envoy reconnecting with 5,000 clusters sends two such maps of 5,000
// entries, and in a reconnect storm of 1,000 Envoys that decoding was a
// quarter of the server's CPU. The result is the same message (FuzzDecode
// compares them), and the same refusals: a malformed message, or a key or
// value that is not UTF-8 (proto3 strings).
func decodeDeltaRequest(b []byte, m *discovery.DeltaDiscoveryRequest) error {
	entries := resumeEntries(b)
	if entries == 0 {
		return proto.Unmarshal(b, m) // none, or not well formed: its error
	}
	// The other fields, as they came (a field 5 that is not
	// length-delimited among them: the runtime keeps it as unknown); then
	// the map's entries.
	rest := make([]byte, 0, len(b))
	versions := make(map[string]string, entries)
	var bad error
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b) // well formed: fields read it
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if num == deltaInitialVersions && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b[n:])
			if err := mapEntry(v, versions); err != nil && bad == nil {
				bad = err
			}
		} else {
			rest = append(rest, b[:n+m]...)
		}
		b = b[n+m:]
	}
	if bad != nil {
		return bad // the stream ends, and gives the place back
	}
	if err := proto.Unmarshal(rest, m); err != nil {
		return err
	}
	m.InitialResourceVersions = versions
	return nil
}

// resumeEntries is the number of initial_resource_versions entries of an
// encoded delta request (0 if it is not well formed: the decoder refuses
// it).
func resumeEntries(b []byte) int {
	entries := 0
	if !fields(b, func(num protowire.Number, _ []byte, _ int) {
		if num == deltaInitialVersions {
			entries++
		}
	}) {
		return 0
	}
	return entries
}

var errEntryUTF8 = errors.New("proto: initial_resource_versions: string field contains invalid UTF-8")

// mapEntry decodes one map<string, string> entry into versions: key 1,
// value 2, either missing reads as ""; other fields are skipped.
func mapEntry(b []byte, versions map[string]string) error {
	var key, val []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if (num == 1 || num == 2) && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return protowire.ParseError(m)
			}
			if num == 1 {
				key = v
			} else {
				val = v
			}
			b = b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return protowire.ParseError(m)
		}
		b = b[m:]
	}
	if !utf8.Valid(key) || !utf8.Valid(val) {
		return errEntryUTF8
	}
	versions[string(key)] = string(val)
	return nil
}
