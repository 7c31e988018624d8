package xds

import "time"

// The sync status as read: the types of ClientStatus and ClientDetail
// (syncstatus.go computes them).

// Sync states.
const (
	// Synced: the client acknowledged the latest response, and the state it
	// holds has the current version of every resource of interest (every
	// resource of the type it may read for a wildcard subscription, else
	// every existing resource it subscribes to).
	Synced = "SYNCED"
	// Stale: a response is sent and not acknowledged yet (Since: when the
	// first response not acknowledged was handed to the server), or the
	// client acknowledged everything sent and still lacks a current version
	// (held back: an assignment waiting for its cluster, routes for their
	// assignments; Since: the commit of the oldest version it lacks). A
	// request being processed reads as STALE for its duration.
	Stale = "STALE"
	// Nacked: the client rejected the latest response it answered, or
	// lacks a resource it rejected (which is not sent again at that
	// version).
	Nacked = "NACKED"
	// NotSent: no response of the type was sent yet on the stream (the
	// cache is not ready, or the first request is being processed).
	NotSent = "NOT_SENT"
)

// SyncLatencySamples is the number of change → ACK latencies kept per
// stream and type (for last, p50, p99).
const SyncLatencySamples = 64

// MaxBehindNames bounds TypeStatus.Behind.
const MaxBehindNames = 10

// ClientStatus is one connected xDS stream and its sync status per type.
type ClientStatus struct {
	Node     string `json:"node"`
	Cluster  string `json:"cluster,omitempty"`
	Identity string `json:"identity,omitempty"` // the certificate SAN xds.authorization matched
	// Mode is delta or sotw (REST-JSON polling has no stream: not listed).
	Mode string `json:"mode"`
	// TypeURL is the stream's: "ads" for an aggregated stream.
	TypeURL   string    `json:"type_url"`
	Stream    int64     `json:"stream"`
	Peer      string    `json:"peer,omitempty"`
	Connected time.Time `json:"connected"`
	Responses uint64    `json:"responses"`
	NACKs     uint64    `json:"nacks"`
	LastNACK  string    `json:"last_nack,omitempty"`
	// SubscribedNames and NameBytes are the resource names the stream
	// subscribes to (every type) and their bytes, as the limits count them.
	SubscribedNames int64 `json:"subscribed_names"`
	NameBytes       int64 `json:"name_bytes"`
	// EstimatedBytes estimates the heap the stream costs the server:
	// PerStreamOverheadBytes + NameBytesFactor × NameBytes +
	// SubscribedNames × PerNameOverheadBytes (measured; see guard.go),
	// plus NameBytesFactor × the initial_resource_versions held. It is an
	// estimate, and an upper bound: it is the cost of names no other
	// stream subscribes to, while streams subscribed to the same set share
	// one copy of it (nameset.go); it leaves out the responses being sent,
	// whose resource encodings are shared by every client.
	EstimatedBytes int64        `json:"memory_estimate_bytes"`
	Types          []TypeStatus `json:"types"`
}

// TypeStatus is a stream's sync status for one type.
type TypeStatus struct {
	Type    string `json:"type"` // clusters, endpoints, listeners, routes (else the URL)
	TypeURL string `json:"type_url"`
	State   string `json:"state"` // SYNCED, STALE, NACKED, NOT_SENT
	// Subscribed: names subscribed to (0 with Wildcard: every resource).
	Subscribed int  `json:"subscribed"`
	Wildcard   bool `json:"wildcard"`
	// Current, Acked and Sent are type generations: the type's now, that
	// of the last response the client acknowledged, and that of the last
	// response sent ("" for none).
	Current string      `json:"current"`
	Acked   string      `json:"acked,omitempty"`
	Sent    string      `json:"sent,omitempty"`
	Since   time.Time   `json:"since,omitzero"` // STALE since, NACKED at
	NACK    *NACKStatus `json:"nack,omitempty"`
	// Behind: up to MaxBehindNames resources of interest the client does
	// not hold at their current version, sorted.
	Behind []string `json:"behind,omitempty"`
	// Change → ACK latency: from the commit of the newest resource version
	// a response carried to the client's ACK of that response (counted when
	// the change came after the client's previous ACK), over the last
	// SyncLatencySamples samples.
	LatencyLast time.Duration `json:"latency_last_ns"`
	LatencyP50  time.Duration `json:"latency_p50_ns"`
	LatencyP99  time.Duration `json:"latency_p99_ns"`
	Samples     int           `json:"samples"`
}

// NACKStatus is the last rejection of a type by a client.
type NACKStatus struct {
	Version string    `json:"version"` // the type generation of the response rejected
	Detail  string    `json:"detail"`
	At      time.Time `json:"at"`
}

// ClientDetail is one client's streams with every resource of interest.
type ClientDetail struct {
	Streams []ClientStreamDetail `json:"streams"`
}

// ClientStreamDetail is one stream's status and resources.
type ClientStreamDetail struct {
	ClientStatus
	Resources []ResourceSync `json:"resources"`
}

// ResourceSync is one resource of interest to a client: the version served
// and the one the client holds as far as the cache knows ("" when it holds
// none, or an older one the compact delta state does not name).
type ResourceSync struct {
	Type     string `json:"type"`
	Name     string `json:"name"`
	Current  string `json:"current"`
	Held     string `json:"held,omitempty"`
	Synced   bool   `json:"synced"`
	Rejected bool   `json:"rejected,omitempty"` // the current version, rejected by the client
}

// ShortType is the short name of a served type URL (clusters, endpoints,
// listeners, routes), else the URL.
func ShortType(typeURL string) string {
	switch typeURL {
	case ClusterType:
		return "clusters"
	case EndpointType:
		return "endpoints"
	case ListenerType:
		return "listeners"
	case RouteType:
		return "routes"
	}
	return typeURL
}
