package testbin

import "fmt"

// HDSCheckerBootstrap is the bootstrap of an Envoy that health-checks for
// the HDS server on 127.0.0.1:port (plaintext): node id node, in zone,
// admin on port 0 (StartEnvoy finds it).
func HDSCheckerBootstrap(node, zone, port string) string {
	return fmt.Sprintf(`node: {id: %s, cluster: checkers, locality: {zone: %s}}
admin: {address: {socket_address: {address: 127.0.0.1, port_value: 0}}}
hds_config:
  api_type: GRPC
  transport_api_version: V3
  grpc_services: [{envoy_grpc: {cluster_name: xdsbridge_hds}}]
static_resources:
  clusters:
  - name: xdsbridge_hds
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {http2_protocol_options: {}}
    load_assignment:
      cluster_name: xdsbridge_hds
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: %s}}}}]}]
`, node, zone, port)
}
