package app

import (
	"sort"

	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/sources/consul"
	"github.com/xdsbridge/xdsbridge/sources/dns"
	"github.com/xdsbridge/xdsbridge/sources/file"
)

// SourceTypes maps the key of a `sources:` entry in the config to the
// factory of that source type. Adding a source type is one line here.
var SourceTypes = map[string]sources.Factory{
	"consul":      consul.New,
	"dns":         dns.New,
	"file":        file.New,
	"policy_file": file.NewPolicy,
}

// SourceTypeNames returns the known source types, sorted.
func SourceTypeNames() []string {
	names := make([]string, 0, len(SourceTypes))
	for n := range SourceTypes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
