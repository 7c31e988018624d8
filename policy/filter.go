package policy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/go-bexpr"
	"github.com/hashicorp/go-bexpr/grammar"
)

// Subset filters are Consul filter expressions (hashicorp/go-bexpr, as in
// Consul's service-resolver subsets), evaluated over a view of each host
// the translator builds (translate.FilterView):
//
//	Service.ID, Service.Service, Service.Tags, Service.Meta.<key>,
//	Service.Address, Service.Port (the address and port published)
//	Node.Node, Node.Datacenter, Node.Meta.<key>
//	Address, Port, Hostname, Weight, Priority, Health (HEALTHY, UNHEALTHY, …)
//	Locality.Region, Locality.Zone, Locality.SubZone
//	Metadata.<namespace>.<key>…
//
// Keys that are not identifiers are written as indexes:
// Service.Meta["app.kubernetes.io/name"] == web. A selector naming
// something a host does not have reads as the empty string: == "x" is
// false, != "x" true, "is empty" true.

// FilterRoots are the first names a filter's selectors may start with.
var FilterRoots = []string{"Address", "Health", "Hostname", "Locality", "Metadata", "Node", "Port", "Priority", "Service", "Weight"}

// filterFields are the names that may follow a root with fields of its
// own: anything else (Node.Address, Service.Kind, …) is not in the view
// and would read as empty, so it is refused rather than matching nothing.
var filterFields = map[string][]string{
	"Service":  {"ID", "Service", "Tags", "Meta", "Address", "Port"},
	"Node":     {"Node", "Datacenter", "Meta"},
	"Locality": {"Region", "Zone", "SubZone"},
}

// MaxFilterBytes bounds a subset filter, and so the work of parsing it
// (go-bexpr's own bound, on the parser's steps, is 2,000,000).
const MaxFilterBytes = 4096

// CompileFilter compiles a subset filter. Besides the syntax it checks that
// every selector starts with one of FilterRoots (or a name a collection
// expression binds), so that a misspelt selector is an error rather than a
// filter that silently matches nothing.
func CompileFilter(expr string) (*bexpr.Evaluator, error) {
	if len(expr) > MaxFilterBytes {
		return nil, fmt.Errorf("%d bytes; at most %d", len(expr), MaxFilterBytes)
	}
	ast, err := grammar.Parse("", []byte(expr))
	if err != nil {
		return nil, fmt.Errorf("%q: %v", expr, err)
	}
	if err := checkSelectors(ast.(grammar.Expression), nil); err != nil {
		return nil, fmt.Errorf("%q: %v", expr, err)
	}
	ev, err := bexpr.CreateEvaluator(expr, bexpr.WithUnknownValue(""))
	if err != nil {
		return nil, fmt.Errorf("%q: %v", expr, err)
	}
	return ev, nil
}

// checkSelectors checks the selectors of e; bound are the names the
// collection expressions around it bind.
func checkSelectors(e grammar.Expression, bound []string) error {
	check := func(sel grammar.Selector) error {
		if len(sel.Path) == 0 {
			return fmt.Errorf("empty selector")
		}
		root := sel.Path[0]
		if slices.Contains(bound, root) {
			return nil
		}
		if slices.Contains(FilterRoots, root) {
			fields, ok := filterFields[root]
			if !ok || len(sel.Path) < 2 || slices.Contains(fields, sel.Path[1]) {
				return nil
			}
			return fmt.Errorf("unknown selector %q: %s has %s", sel.String(), root, strings.Join(fields, ", "))
		}
		return fmt.Errorf("unknown selector %q: selectors start with %s", sel.String(), strings.Join(FilterRoots, ", "))
	}
	switch x := e.(type) {
	case *grammar.UnaryExpression:
		return checkSelectors(x.Operand, bound)
	case *grammar.BinaryExpression:
		if err := checkSelectors(x.Left, bound); err != nil {
			return err
		}
		return checkSelectors(x.Right, bound)
	case *grammar.MatchExpression:
		return check(x.Selector)
	case *grammar.CollectionExpression:
		if err := check(x.Selector); err != nil {
			return err
		}
		b := x.NameBinding
		inner := append(slices.Clip(bound), b.Default, b.Index, b.Value)
		return checkSelectors(x.Inner, inner)
	default:
		return fmt.Errorf("unexpected expression %T", e)
	}
}
