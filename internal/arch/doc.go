// Package arch holds the tests of the import rules that
// docs/architecture.md states ("Import rules"): which packages may import
// the config file's schema, and what the schema may import; that the
// store (xds/store) imports no package of the module.
package arch
