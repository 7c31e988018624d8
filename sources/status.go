package sources

import (
	"context"
	"time"
)

// Confirmer is implemented by sinks that track when each source last
// confirmed its state. Sources reach it through Confirm, which does
// nothing with a sink that does not implement it.
type Confirmer interface {
	// Confirm reports that the source read its registry successfully at
	// at and that what it published last is still its whole state
	// (changed or not). It clears a stale mark that a Fail reported
	// before at. It blocks until the report is accepted or ctx is done.
	Confirm(ctx context.Context, source string, at time.Time)
}

// Confirm calls sink.Confirm when the sink is a Confirmer.
func Confirm(ctx context.Context, sink Sink, source string, at time.Time) {
	if c, ok := sink.(Confirmer); ok {
		c.Confirm(ctx, source, at)
	}
}

// Reasons an instance is dropped by its source (Dropped.Reason).
const (
	// DropExcludedTag: the instance carries a tag the source's config
	// excludes.
	DropExcludedTag = "excluded_tag"
	// DropUnresolvable: the instance's address is not an IP and could not
	// be resolved.
	DropUnresolvable = "unresolvable_address"
	// DropLimit: the instance is over one of the source's limits.
	DropLimit = "limit"
	// DropMalformed: the registry's entry is unusable (no address, a port
	// out of range, a value of the wrong type).
	DropMalformed = "malformed"
)

// Dropped is one instance a source read from its registry and left out of
// what it publishes.
type Dropped struct {
	Service string `json:"service"`
	// Instance names the instance as the registry does (a Consul service
	// ID and node, a DNS name, an entry of the file).
	Instance string `json:"instance"`
	// Reason is one of the Drop* constants.
	Reason string `json:"reason"`
	// Detail says what was wrong in the user's terms, on one line.
	Detail string `json:"detail"`
}

// DropReporter is implemented by sinks that show what sources drop.
// Sources reach it through ReportDropped, which does nothing with a sink
// that does not implement it.
type DropReporter interface {
	// ReportDropped replaces the list of instances the source currently
	// drops (nil: none). The sink keeps a bounded number of them and
	// counts all by reason. It blocks until the report is accepted or
	// ctx is done; the sink owns the slice afterwards.
	ReportDropped(ctx context.Context, source string, dropped []Dropped)
}

// ReportDropped calls sink.ReportDropped when the sink is a DropReporter.
func ReportDropped(ctx context.Context, sink Sink, source string, dropped []Dropped) {
	if r, ok := sink.(DropReporter); ok {
		r.ReportDropped(ctx, source, dropped)
	}
}

// HostExplainer is implemented by sources that can say why a host they
// publish has its health: the registry's own checks. ExplainHost is safe
// for concurrent use with Run; it returns "" when it knows nothing of the
// host.
type HostExplainer interface {
	ExplainHost(service string, host HostKey) string
}
