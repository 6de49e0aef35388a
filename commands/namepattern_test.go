package commands

import (
	"regexp"
	"strings"
	"testing"
)

// namePattern accepts what ^[A-Za-z0-9_.-]{1,128}$ accepts, and nothing
// else.
func TestNamePatternIsItsRegexp(t *testing.T) {
	re := regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)
	cases := []string{"", "a", "queue:x", "ready", "a.b-c_d", "ü", "a b", "a\x00", strings.Repeat("q", 128),
		strings.Repeat("q", 129), "/", "*", "Z9", "-", "."}
	for c := 0; c < 256; c++ {
		cases = append(cases, string([]byte{byte(c)}), "x"+string([]byte{byte(c)}))
	}
	for _, s := range cases {
		if got, want := queuePattern.MatchString(s), re.MatchString(s); got != want {
			t.Errorf("%q: %v, the regexp says %v", s, got, want)
		}
	}
}
