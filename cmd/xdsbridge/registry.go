package main

import (
	"sort"

	"github.com/xdsbridge/xdsbridge/sources"
)

// sourceTypes maps the key of a `sources:` entry in the config to the factory
// of that source type. Adding a source type is one line here.
var sourceTypes = map[string]sources.Factory{}

func sourceTypeNames() []string {
	names := make([]string, 0, len(sourceTypes))
	for n := range sourceTypes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
