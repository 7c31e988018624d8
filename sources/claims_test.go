package sources

import (
	"context"
	"testing"
)

func TestCheckClaims(t *testing.T) {
	err := CheckClaims([]Source{lpClaimer{"a", []string{"x", "y"}}, lpClaimer{"b", []string{"y"}}})
	if err == nil || err.Error() != `service "y" is claimed by sources "a" and "b": a service name is owned by one source` {
		t.Fatalf("err = %v", err)
	}
	if err := CheckClaims([]Source{lpClaimer{"a", []string{"x"}}, lpClaimer{"b", []string{"y"}}}); err != nil {
		t.Fatal(err)
	}
}

type lpClaimer struct {
	name  string
	names []string
}

func (c lpClaimer) Name() string                    { return c.name }
func (c lpClaimer) Run(context.Context, Sink) error { return nil }
func (c lpClaimer) ClaimedNames() ([]string, error) { return c.names, nil }
