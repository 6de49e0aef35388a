package names

import (
	"regexp"
	"strings"
	"testing"
)

// Each rule accepts what its regular expression accepts, and nothing else.
func TestEachRuleIsItsRegexp(t *testing.T) {
	cases := []string{"", "a", "queue:x", "ready", "a.b-c_d", "ü", "a b", "a\x00", "a@b", "default",
		strings.Repeat("q", 64), strings.Repeat("q", 65), strings.Repeat("q", 128), strings.Repeat("q", 129),
		"/", "*", "Z9", "-", "."}
	for c := 0; c < 256; c++ {
		cases = append(cases, string([]byte{byte(c)}), "x"+string([]byte{byte(c)}))
	}
	rules := []struct {
		name  string
		check func(string) bool
		re    *regexp.Regexp
	}{
		{"Queue", Queue, regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)},
		{"JobID", JobID, regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)},
		{"Schedule", Schedule, regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)},
		{"Worker", Worker, regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)},
		{"Principal", Principal, regexp.MustCompile(`^[A-Za-z0-9_.@-]{1,64}$`)},
		{"Step", Step, regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)},
	}
	for _, r := range rules {
		for _, s := range cases {
			want := r.re.MatchString(s) && !(r.name == "Principal" && s == "default")
			if got := r.check(s); got != want {
				t.Errorf("%s(%q): %v, the regexp says %v", r.name, s, got, want)
			}
		}
	}
}

func TestJobTypeIsTextWithoutControls(t *testing.T) {
	for s, want := range map[string]bool{"": false, "email": true, "a b/ü": true, "a\nb": false, "\xff": false,
		strings.Repeat("t", 128): true, strings.Repeat("t", 129): false} {
		if got := JobType(s); got != want {
			t.Errorf("JobType(%q) = %v, want %v", s, got, want)
		}
	}
}
