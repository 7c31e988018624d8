package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"
)

// reload asks a running bridge to reload its config (POST /debug/reload)
// and prints what it applied, or why it refused it.
func reload(fs *flag.FlagSet, f *cmdFlags, stdout io.Writer) error {
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	c, err := newAdminClient(f)
	if err != nil && *f.status.admin == "" {
		// The admin address comes from the config file, which does not
		// load: the running bridge is never asked.
		return fmt.Errorf("%w (the running bridge was not asked: give -admin, and -token-file if it needs one, to have it check the file)", err)
	}
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

// printOwnership prints the names more than one source publishes, with
// the source that owns each, then when the config was loaded and whether
// the last reload was refused.
func printOwnership(w io.Writer, d sourcesView, now time.Time) {
	if len(d.Conflicts) > 0 {
		fmt.Fprintln(w, "\nServices published by more than one source (the first owns it: priority, then config order):")
		names := make([]string, 0, len(d.Conflicts))
		for n := range d.Conflicts {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			c := d.Conflicts[n]
			fmt.Fprintf(w, "  %s: owned by %s, also published by %s\n", term(n), term(c[0]), term(strings.Join(c[1:], ", ")))
		}
	}
	if d.Config.LoadedAt.IsZero() {
		return
	}
	fmt.Fprintf(w, "\nConfig loaded %s ago", now.Sub(d.Config.LoadedAt).Round(time.Second))
	if !d.Config.LastReloadOK {
		fmt.Fprintf(w, "; last reload REFUSED %s ago: %s", now.Sub(d.Config.LastReload).Round(time.Second), term(d.Config.LastError))
	}
	fmt.Fprintln(w)
}
