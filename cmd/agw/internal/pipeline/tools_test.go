package pipeline

import (
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

func TestValidToolName(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"sort", "sha256sum", "g++", "python3.12", "my_tool", "x-y"} {
		if err := ValidToolName(name); err != nil {
			t.Errorf("%q: %v", name, err)
		}
	}
	for _, name := range []string{"", "/bin/sort", "./sort", "bin/sort", "..", ".", "-sort", "so rt", "sort;ls", "s\x00", "ünï", strings.Repeat("a", 65)} {
		if err := ValidToolName(name); err == nil {
			t.Errorf("%q accepted", name)
		}
	}
}

func TestDefaultToolsRunNoPrograms(t *testing.T) {
	t.Parallel()
	for _, name := range DefaultTools {
		if RunsPrograms(name) {
			t.Errorf("default tool %q runs other programs", name)
		}
	}
	for _, name := range []string{"sh", "bash", "python3", "perl", "node", "awk", "sed", "env", "xargs", "find", "timeout", "nice"} {
		if slices.Contains(DefaultTools, name) {
			t.Errorf("%q is in the default set", name)
		}
		if !RunsPrograms(name) {
			t.Errorf("%q is not known to run programs", name)
		}
	}
}

func TestResolveTools(t *testing.T) {
	t.Parallel()
	fakePath := func(name string) (string, error) {
		switch name {
		case "sort", "uniq", "sh":
			return "/usr/bin/" + name, nil
		}
		return "", exec.ErrNotFound
	}

	t.Run("DefaultsAreWhatIsFound", func(t *testing.T) {
		t.Parallel()
		ts, missing, err := ResolveTools(nil, fakePath)
		if err != nil || len(missing) != 0 {
			t.Fatalf("missing %v, err %v", missing, err)
		}
		if got := ts.Names(); !slices.Equal(got, []string{"sort", "uniq"}) {
			t.Fatalf("names = %v", got)
		}
	})

	t.Run("ExplicitNamesReportTheMissing", func(t *testing.T) {
		t.Parallel()
		ts, missing, err := ResolveTools([]string{"sh", "sort", "nosuchtool"}, fakePath)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ts.Names(), []string{"sh", "sort"}) || !slices.Equal(missing, []string{"nosuchtool"}) {
			t.Fatalf("names %v, missing %v", ts.Names(), missing)
		}
	})

	t.Run("RejectsPaths", func(t *testing.T) {
		t.Parallel()
		if _, _, err := ResolveTools([]string{"/bin/sh"}, fakePath); err == nil {
			t.Fatal("a path was accepted as a tool name")
		}
	})

	t.Run("LookupRefusesWhatIsNotOffered", func(t *testing.T) {
		t.Parallel()
		ts, _, _ := ResolveTools(nil, fakePath)
		for _, tool := range []string{"sh", "/usr/bin/sort", "../sort", "grep"} {
			_, err := ts.lookup(1, tool)
			if !errors.Is(err, ErrRefused) {
				t.Errorf("%q: err = %v, want a refusal", tool, err)
			}
		}
		if path, err := ts.lookup(1, "sort"); err != nil || path != "/usr/bin/sort" {
			t.Fatalf("sort: %q, %v", path, err)
		}
	})
}
