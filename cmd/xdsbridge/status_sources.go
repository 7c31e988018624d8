package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// sourceView is a source as /debug/sources shows it (the fields status
// prints).
type sourceView struct {
	Name   string `json:"name"`
	Status struct {
		Synced        bool           `json:"synced"`
		Stale         bool           `json:"stale"`
		ConfirmedAge  string         `json:"confirmed_age"`
		ChangedAge    string         `json:"changed_age"`
		Services      int            `json:"services"`
		LastError     string         `json:"last_error"`
		Dropped       []droppedView  `json:"dropped"`
		DroppedCounts map[string]int `json:"dropped_counts"`
	} `json:"status"`
}

// droppedView is an instance a source dropped.
type droppedView struct {
	Service  string `json:"service"`
	Instance string `json:"instance"`
	Reason   string `json:"reason"`
	Detail   string `json:"detail"`
}

// sourcesView is /debug/sources: the sources, the names more than one
// source publishes (owner first) and the config reload state.
type sourcesView struct {
	Sources   []sourceView        `json:"sources"`
	Conflicts map[string][]string `json:"conflicts"`
	Config    struct {
		LoadedAt     time.Time `json:"loaded_at"`
		LastReload   time.Time `json:"last_reload"`
		LastReloadOK bool      `json:"last_reload_ok"`
		LastError    string    `json:"last_error"`
	} `json:"config"`
}

// debugSourcesAll reads /debug/sources.
func (c *adminClient) debugSourcesAll() (sourcesView, error) {
	var out sourcesView
	err := c.get("/debug/sources", nil, &out)
	return out, err
}

// debugSources reads the sources of /debug/sources.
func (c *adminClient) debugSources() ([]sourceView, error) {
	out, err := c.debugSourcesAll()
	return out.Sources, err
}

// printSources prints one row per source: its state, the time since it
// last confirmed its state (read its registry successfully, changed or
// not) and since its content last changed, what it drops, its last error.
func printSources(w io.Writer, srcs []sourceView) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SOURCE\tSTATE\tSERVICES\tCONFIRMED\tCHANGED\tDROPPED\tLAST ERROR")
	for _, s := range srcs {
		st := s.Status
		state := "NOT SYNCED"
		switch {
		case st.Stale:
			state = "STALE"
		case st.Synced:
			state = "SYNCED"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", term(s.Name), state, st.Services, agoText(st.ConfirmedAge), agoText(st.ChangedAge), droppedText(st.DroppedCounts), orDash(term(st.LastError)))
	}
	tw.Flush()
}

func agoText(age string) string {
	if age == "" {
		return "-"
	}
	return age + " ago"
}

// droppedText is "3 excluded_tag, 1 limit", or "-".
func droppedText(counts map[string]int) string {
	if len(counts) == 0 {
		return "-"
	}
	reasons := make([]string, 0, len(counts))
	for r := range counts {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	parts := make([]string, len(reasons))
	for i, r := range reasons {
		parts[i] = fmt.Sprintf("%d %s", counts[r], term(r))
	}
	return strings.Join(parts, ", ")
}

// printDropped prints the instances of service ("": of every service)
// that their sources dropped, and why; nothing when there is none.
func printDropped(w io.Writer, service string, srcs []sourceView) {
	var rows []string
	for _, s := range srcs {
		for _, d := range s.Status.Dropped {
			if service == "" || d.Service == service {
				rows = append(rows, fmt.Sprintf("%s\t%s\t%s\t%s\t%s\n", term(d.Service), term(s.Name), term(d.Instance), term(d.Reason), term(d.Detail)))
			}
		}
	}
	if len(rows) == 0 {
		return
	}
	sort.Strings(rows)
	fmt.Fprintln(w, "\nDropped by their source:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVICE\tSOURCE\tINSTANCE\tREASON\tDETAIL")
	for _, r := range rows {
		fmt.Fprint(tw, r)
	}
	tw.Flush()
}
