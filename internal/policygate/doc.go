// Package policygate is a differential test of the policy translation
// against the clients themselves: policies (policy files and Consul config
// entries) go through the bridge's own parser and merge loop into a served
// xDS cache, and a real Envoy over delta ADS, a real Envoy over SotW ADS
// and a real grpc-go xDS client must accept every resource published (no
// NACK); what they would refuse must be refused before, by the parser or
// the translator, with a diagnostic.
//
// The package holds only tests. The committed corpus (testdata/corpus)
// runs in CI (XDSBRIDGE_GATE_CORPUS=<dir> runs another directory, such
// as a saved run); XDSBRIDGE_GATE_N=<n> runs n generated policies more
// (XDSBRIDGE_GATE_SEED picks the seed, XDSBRIDGE_GATE_SAVE=<dir> saves
// the first policy of each cause of rejection, minimised, and with
// XDSBRIDGE_GATE_SAVE_ALL=1 every policy).
package policygate
