package config

import "github.com/xdsbridge/xdsbridge/config/decode"

// The blocks below are read here and used by other packages: the app
// (internal/app/options.go) converts each to its package's options, where
// its defaults and ranges are defined and checked (a 0 or absent field is
// the default). Each has the fields of that options type, in its order,
// so that the conversion is a Go type conversion: a field added to one
// and not the other is a compile error in the app.

// Limits is the `limits:` block: what one service's resources may carry
// (translate.Limits for each field, its default and its range).
type Limits struct {
	MaxMetadataDepth       int `json:"max_metadata_depth"`
	MaxMetadataBytes       int `json:"max_metadata_bytes"`
	MaxHostnameBytes       int `json:"max_hostname_bytes"`
	MaxNameBytes           int `json:"max_name_bytes"`
	MaxResourceBytes       int `json:"max_resource_bytes"`
	MaxAssignmentEndpoints int `json:"max_assignment_endpoints"`
	MaxFailoverEndpoints   int `json:"max_failover_endpoints"`
}

// XDSLimits is the `xds.limits:` block: what one client can make the
// server hold or do (xds.Limits for each field, its default and its
// range).
type XDSLimits struct {
	MaxStreams                          int     `json:"max_streams"`
	MaxStreamsPerConnection             int     `json:"max_streams_per_connection"`
	MaxNamesPerStream                   int     `json:"max_names_per_stream"`
	MaxNameBytesPerStream               int     `json:"max_name_bytes_per_stream"`
	MaxNamesPerConnection               int     `json:"max_names_per_connection"`
	MaxNameBytesPerConnection           int     `json:"max_name_bytes_per_connection"`
	MaxNameBytesTotal                   int     `json:"max_name_bytes_total"`
	MaxInitialVersionBytesPerConnection int     `json:"max_initial_version_bytes_per_connection"`
	MaxNodeBytes                        int     `json:"max_node_bytes"`
	MaxRecvMessageBytes                 int     `json:"max_recv_message_bytes"`
	MaxHeaderBytes                      int     `json:"max_header_bytes"`
	RequestsPerSecond                   float64 `json:"requests_per_second"`
	RequestBurst                        int     `json:"request_burst"`
	NACKLogsPerMinute                   int     `json:"nack_logs_per_minute"`
	ResumesDecoding                     int     `json:"resumes_decoding"`
	MaxUnwrittenResponseBytes           int     `json:"max_unwritten_response_bytes"`
	MaxUnansweredResponses              int     `json:"max_unanswered_responses"`
}

// Authorization is the `xds.authorization:` block: which clients may
// connect and what each may read (xds.Authorization for its rules).
type Authorization struct {
	Allow []AuthRule `json:"allow"`
}

// AuthRule is one rule of xds.authorization.allow (xds.AuthRule).
type AuthRule struct {
	SPIFFETrustDomain string   `json:"spiffe_trust_domain,omitempty"`
	URI               string   `json:"uri,omitempty"`
	URIPrefix         string   `json:"uri_prefix,omitempty"`
	DNS               string   `json:"dns,omitempty"`
	DNSSuffix         string   `json:"dns_suffix,omitempty"`
	Resources         []string `json:"resources,omitempty"`
}

// Egress is the `egress:` block: the egress route table and listener
// (translate.Egress for each field and its default).
type Egress struct {
	RouteConfigName string          `json:"route_config_name"`
	Listener        *EgressListener `json:"listener"`
	DomainSuffixes  []string        `json:"domain_suffixes"`
	Include         EgressInclude   `json:"include"`
	Fallback        string          `json:"fallback"`
	VHDS            bool            `json:"vhds"`
}

// EgressListener is egress.listener (translate.EgressListener).
type EgressListener struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	Port    uint32 `json:"port"`
}

// EgressInclude is egress.include (translate.EgressInclude).
type EgressInclude struct {
	Sources []string `json:"sources"`
	Tags    []string `json:"tags"`
	Names   []string `json:"names"`
}

// Filesystem is the `outputs.filesystem:` block: the served resources as
// files for Envoy's path-based config sources (fileout.Config for each
// field, its default and its range).
type Filesystem struct {
	Dir      string          `json:"dir"`
	Format   string          `json:"format"`
	Mode     string          `json:"mode"`
	Debounce decode.Duration `json:"debounce"`
	EnvoyDir string          `json:"envoy_dir"`
}
