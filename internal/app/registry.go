package app

import (
	"sort"

	"github.com/xdsbridge/xdsbridge/sources"
	"github.com/xdsbridge/xdsbridge/sources/consul"
	"github.com/xdsbridge/xdsbridge/sources/dns"
	"github.com/xdsbridge/xdsbridge/sources/file"
)

// sourceTypes maps the key of a `sources:` entry in the config to the
// factory of that source type. Adding a source type is one line here.
// Read only: SourceType and SourceTypeNames are its interface.
var sourceTypes = map[string]sources.Factory{
	"consul":      consul.New,
	"dns":         dns.New,
	"file":        file.New,
	"policy_file": file.NewPolicy,
}

// SourceType returns the factory of a source type (the key of a
// `sources:` entry), and whether there is one.
func SourceType(name string) (sources.Factory, bool) {
	f, ok := sourceTypes[name]
	return f, ok
}

// SourceTypeNames returns the known source types, sorted.
func SourceTypeNames() []string {
	names := make([]string, 0, len(sourceTypes))
	for n := range sourceTypes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
