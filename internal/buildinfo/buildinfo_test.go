package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestFromBuildInfoVCSSettings(t *testing.T) {
	bi := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/xdsbridge/xdsbridge", Version: "(devel)"},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2026-11-26T14:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	in := fromBuildInfo("v0.1.0", bi)
	if in.Version != "v0.1.0" || in.Revision != "0123456789abcdef0123456789abcdef01234567" ||
		in.Time != "2026-11-26T14:00:00Z" || !in.Modified || in.GoVersion != "go1.26.8" {
		t.Fatalf("fromBuildInfo = %+v", in)
	}
	if got, want := in.Commit(), "0123456789abcdef0123456789abcdef01234567-modified"; got != want {
		t.Errorf("Commit() = %q, want %q", got, want)
	}
	if got, want := in.Short(), "v0.1.0 (0123456789ab-modified, go1.26.8)"; got != want {
		t.Errorf("Short() = %q, want %q", got, want)
	}
	s := in.String()
	for _, want := range []string{"xdsbridge v0.1.0\n", "commit:   0123456789abcdef0123456789abcdef01234567-modified\n", "date:     2026-11-26T14:00:00Z\n", "go:       go1.26.8\n"} {
		if !strings.Contains(s, want) {
			t.Errorf("String() = %q, lacks %q", s, want)
		}
	}
}

func TestFromBuildInfoVersionFallback(t *testing.T) {
	for _, tc := range []struct {
		name, stamped, module, want string
	}{
		{"stamped wins over module", "v0.2.0", "v0.1.0", "v0.2.0"},
		{"go install of a tag", "", "v0.1.0", "v0.1.0"},
		{"local build", "", "(devel)", "devel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bi := &debug.BuildInfo{Main: debug.Module{Version: tc.module}}
			if got := fromBuildInfo(tc.stamped, bi).Version; got != tc.want {
				t.Errorf("Version = %q, want %q", got, tc.want)
			}
		})
	}
	in := fromBuildInfo("", nil)
	if in.Version != "devel" || in.Revision != "unknown" || in.Time != "unknown" || in.Modified {
		t.Errorf("without build info: %+v", in)
	}
}

// Without the toolchain's VCS settings the link-time ones are used; with
// them, the toolchain's win.
func TestFromBuildInfoLinkTimeCommit(t *testing.T) {
	defer func(r, c, m string) { Revision, CommitTime, Modified = r, c, m }(Revision, CommitTime, Modified)
	Revision, CommitTime, Modified = "1111111111111111111111111111111111111111", "2026-11-01T00:00:00Z", "true"
	in := fromBuildInfo("v0.1.0", &debug.BuildInfo{})
	if in.Revision != Revision || in.Time != CommitTime || !in.Modified {
		t.Errorf("link-time commit not used: %+v", in)
	}
	in = fromBuildInfo("v0.1.0", &debug.BuildInfo{Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "2222222222222222222222222222222222222222"},
		{Key: "vcs.time", Value: "2026-11-02T00:00:00Z"},
		{Key: "vcs.modified", Value: "false"},
	}})
	if in.Revision != "2222222222222222222222222222222222222222" || in.Time != "2026-11-02T00:00:00Z" || in.Modified {
		t.Errorf("toolchain's VCS settings do not win: %+v", in)
	}
}
