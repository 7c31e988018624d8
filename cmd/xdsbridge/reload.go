package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// reload asks a running bridge to reload its config (POST /debug/reload)
// and prints what it applied, or why it refused it.
func reload(fs *flag.FlagSet, f *cmdFlags, stdout io.Writer) error {
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	c, err := newAdminClient(f)
	if err != nil {
		return err
	}
	var res struct {
		Result    string   `json:"result"`
		Error     string   `json:"error"`
		Added     []string `json:"added"`
		Removed   []string `json:"removed"`
		Replaced  []string `json:"replaced"`
		Unchanged []string `json:"unchanged"`
	}
	code, err := c.post("/debug/reload", &res)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("reload refused, the running config stays: %s", res.Error)
	}
	fmt.Fprintln(stdout, "config reloaded")
	for _, l := range []struct {
		what  string
		names []string
	}{{"added", res.Added}, {"removed", res.Removed}, {"replaced", res.Replaced}, {"unchanged", res.Unchanged}} {
		if len(l.names) > 0 {
			fmt.Fprintf(stdout, "  sources %s: %s\n", l.what, strings.Join(l.names, ", "))
		}
	}
	return nil
}

// post sends an empty POST and decodes the JSON answer of a 200 or 422
// into v; it returns the status code.
func (c *adminClient) post(path string, v any) (int, error) {
	req, err := http.NewRequest(http.MethodPost, c.base+path, nil)
	if err != nil {
		return 0, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	switch resp.StatusCode {
	case http.StatusOK, http.StatusUnprocessableEntity:
	case http.StatusUnauthorized:
		return 0, fmt.Errorf("%s: %s (the admin listener needs a token: -token-file or admin.token_file)", path, resp.Status)
	default:
		return 0, fmt.Errorf("%s: %s: %s", path, resp.Status, strings.TrimSpace(string(b)))
	}
	if err := json.Unmarshal(b, v); err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return resp.StatusCode, nil
}

// statusSources prints each source's state and the names two sources
// publish (which one owns each), then the config reload state, from
// /debug/sources.
func statusSources(c *adminClient, w io.Writer, now time.Time) error {
	var d struct {
		Sources []struct {
			Name   string `json:"name"`
			Status struct {
				Synced     bool   `json:"synced"`
				Stale      bool   `json:"stale"`
				Services   int    `json:"services"`
				ClaimsLost int    `json:"claims_lost"`
				LastError  string `json:"last_error"`
			} `json:"status"`
		} `json:"sources"`
		Conflicts map[string][]string `json:"conflicts"`
		Config    struct {
			LoadedAt     time.Time `json:"loaded_at"`
			LastReload   time.Time `json:"last_reload"`
			LastReloadOK bool      `json:"last_reload_ok"`
			LastError    string    `json:"last_error"`
		} `json:"config"`
	}
	if err := c.get("/debug/sources", nil, &d); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SOURCE\tSTATE\tSERVICES\tOWNED BY ANOTHER\tLAST ERROR")
	for _, s := range d.Sources {
		state := "NOT SYNCED"
		switch {
		case s.Status.Stale:
			state = "STALE"
		case s.Status.Synced:
			state = "SYNCED"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", s.Name, state, s.Status.Services, s.Status.ClaimsLost, s.Status.LastError)
	}
	tw.Flush()
	if len(d.Conflicts) > 0 {
		fmt.Fprintln(w, "\nservices published by more than one source (the first owns it: priority, then config order):")
		names := make([]string, 0, len(d.Conflicts))
		for n := range d.Conflicts {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			c := d.Conflicts[n]
			fmt.Fprintf(w, "  %s: owned by %s, also published by %s\n", n, c[0], strings.Join(c[1:], ", "))
		}
	}
	fmt.Fprintf(w, "\nconfig loaded %s ago", now.Sub(d.Config.LoadedAt).Round(time.Second))
	if !d.Config.LastReloadOK {
		fmt.Fprintf(w, "; last reload REFUSED %s ago: %s", now.Sub(d.Config.LastReload).Round(time.Second), d.Config.LastError)
	}
	fmt.Fprintln(w)
	return nil
}
