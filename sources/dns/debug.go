package dns

import (
	"net/netip"
	"time"
)

// Debug is what DebugInfo returns.
type Debug struct {
	// Resolvers are the servers queried (empty before Run starts).
	Resolvers []string    `json:"resolvers"`
	Names     []NameDebug `json:"names"`
}

// NameDebug is the state of one configured DNS name.
type NameDebug struct {
	Service string `json:"service"`
	Name    string `json:"name"`
	Type    string `json:"type"`
	// Answer is the last successful answer: IPs, or ip:port in SRV mode.
	Answer []string `json:"answer"`
	// Current is the address in use (LOGICAL_DNS only).
	Current string `json:"current,omitempty"`
	// TTL is the TTL of the last answer (minimum, or first record for
	// LOGICAL_DNS); Interval is the delay chosen before the next refresh.
	TTL                 string     `json:"ttl"`
	Interval            string     `json:"interval"`
	NextRefresh         *time.Time `json:"next_refresh,omitempty"`
	LastSuccess         *time.Time `json:"last_success,omitempty"`
	LastError           string     `json:"last_error,omitempty"`
	LastErrorTime       *time.Time `json:"last_error_time,omitempty"`
	ConsecutiveFailures int        `json:"consecutive_failures"`
}

// DebugInfo returns a snapshot of every name's state. It is safe to call
// concurrently with Run.
func (s *Source) DebugInfo() any {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := Debug{Resolvers: append([]string{}, s.resolvers...), Names: make([]NameDebug, 0, len(s.targets))}
	for _, t := range s.targets {
		d.Names = append(d.Names, t.debug())
	}
	return d
}

// debug describes t; the caller holds Source.mu.
func (t *target) debug() NameDebug {
	n := NameDebug{
		Service:             t.svc.cfg.Name,
		Name:                t.spec.name,
		Type:                t.svc.cfg.Type,
		Answer:              make([]string, 0, len(t.answer)),
		TTL:                 t.ttl.String(),
		Interval:            t.interval.String(),
		NextRefresh:         timePtr(t.next),
		LastSuccess:         timePtr(t.lastOK),
		LastErrorTime:       timePtr(t.lastErrAt),
		ConsecutiveFailures: t.failures,
	}
	for _, a := range t.answer {
		n.Answer = append(n.Answer, addrString(a, t.spec.srv))
	}
	if t.current != nil {
		n.Current = addrString(*t.current, true)
	}
	if t.lastErr != nil {
		n.LastError = t.lastErr.Error()
	}
	return n
}

func addrString(a hostAddr, withPort bool) string {
	if withPort {
		return netip.AddrPortFrom(a.IP, uint16(a.Port)).String()
	}
	return a.IP.String()
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
