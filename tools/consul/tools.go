//go:build tools

// Package tools pins the Consul agent the integration tests run against.
// Build it with: go build -o BIN github.com/hashicorp/consul
package tools

import _ "github.com/hashicorp/consul"
