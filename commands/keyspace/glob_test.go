package keyspace

import (
	"testing"
)

// redisMatch is Redis's stringmatchlen (util.c, without nocase), ported as
// literally as Go allows: the reference glob is checked against.
func redisMatch(pattern, s string) bool {
	for len(pattern) > 0 && len(s) > 0 {
		switch pattern[0] {
		case '*':
			for len(pattern) > 1 && pattern[1] == '*' {
				pattern = pattern[1:]
			}
			if len(pattern) == 1 {
				return true
			}
			for len(s) > 0 {
				if redisMatch(pattern[1:], s) {
					return true
				}
				s = s[1:]
			}
			return false
		case '?':
			s = s[1:]
		case '[':
			var match bool
			if pattern, match = redisClass(pattern[1:], s[0]); !match {
				return false
			}
			s = s[1:]
			if len(pattern) == 0 {
				return len(s) == 0 // the unclosed class ended the pattern
			}
		case '\\':
			if len(pattern) >= 2 {
				pattern = pattern[1:]
			}
			fallthrough
		default:
			if pattern[0] != s[0] {
				return false
			}
			s = s[1:]
		}
		pattern = pattern[1:]
		if len(s) == 0 {
			for len(pattern) > 0 && pattern[0] == '*' {
				pattern = pattern[1:]
			}
			break
		}
	}
	return len(pattern) == 0 && len(s) == 0
}

// redisClass is stringmatchlen's class: it matches c against the class
// after a '[' and returns the pattern left at its ']' or end.
func redisClass(pattern string, c byte) (string, bool) {
	not := len(pattern) > 0 && pattern[0] == '^'
	if not {
		pattern = pattern[1:]
	}
	match := false
	for {
		if len(pattern) >= 2 && pattern[0] == '\\' {
			pattern = pattern[1:]
			if pattern[0] == c {
				match = true
			}
		} else if len(pattern) == 0 {
			break
		} else if pattern[0] == ']' {
			break
		} else if len(pattern) >= 3 && pattern[1] == '-' {
			lo, hi := pattern[0], pattern[2]
			if lo > hi {
				lo, hi = hi, lo
			}
			pattern = pattern[2:]
			if c >= lo && c <= hi {
				match = true
			}
		} else if pattern[0] == c {
			match = true
		}
		pattern = pattern[1:]
	}
	return pattern, match != not
}

func TestGlobMatchesLikeRedis(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern, s string
		want       bool
	}{
		{"*", "", false}, // Redis's quirk; keys are never empty
		{"*", "job:1", true},
		{"worker:*:alive", "worker:w-1:alive", true},
		{"worker:*:alive", "worker:w-1:stats", false},
		{"worker:*:alive", "worker::alive", true},
		{"job:?", "job:a", true},
		{"job:?", "job:ab", false},
		{"job:[ab]*", "job:b1", true},
		{"job:[ab]*", "job:c1", false},
		{"job:[^ab]*", "job:c1", true},
		{"job:[a-c]", "job:b", true},
		{"job:[c-a]", "job:b", true},
		{"job:[a\\]]", "job:]", true},
		{"job:\\*", "job:*", true},
		{"job:\\*", "job:x", false},
		{"job:[]x", "job:x", false},
		{"job:[ab", "job:a", true},
		{"a**b", "ab", true},
		{"a*b*c", "axxbyyc", true},
		{"a*b*c", "axxbyy", false},
		{"trailing\\", "trailing\\", true},
	}
	for _, tc := range tests {
		if got := CompileGlob(tc.pattern).Match(tc.s); got != tc.want {
			t.Errorf("glob %q match %q = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
		if got := redisMatch(tc.pattern, tc.s); got != tc.want {
			t.Errorf("reference %q match %q = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
}

func TestGlobPrefixAndSuffix(t *testing.T) {
	t.Parallel()
	for pattern, want := range map[string][2]string{
		"job:*":         {"job:", ""},
		"worker:w1:*":   {"worker:w1:", ""},
		"*":             {"", ""},
		"job:a\\*b*":    {"job:a*b", ""},
		"*:alive":       {"", ":alive"},
		"*\\?x":         {"", "?x"},
		"queue:[ab]":    {"queue:", ""},
		"job:abc":       {"job:abc", "job:abc"},
		"capability:?x": {"capability:", "x"},
	} {
		g := CompileGlob(pattern)
		if got := [2]string{g.prefix, g.suffix}; got != want {
			t.Errorf("prefix and suffix of %q = %q, want %q", pattern, got, want)
		}
	}
}

func TestGlobCanMatchShape(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern string
		kind    keyKind
		want    bool
	}{
		{"*", kindJob, true},
		{"job:*", kindJob, true},
		{"job:*", kindJobWorker, true},
		{"job:*:worker", kindJob, false},
		{"job:*:worker", kindJobWorker, true},
		{"worker:*:alive", kindJob, false},
		{"worker:*:alive", kindWorkerAlive, true},
		{"worker:*:alive", kindWorkerStats, false},
		{"worker:*:alive", kindCapability, false},
		{"*:alive", kindJob, true}, // job:alive
		{"*:alive", kindJobWorker, false},
		{"*x:alive", kindQueue, false},
		{"*:alive", kindWorkerAlive, true},
		{"*:workers", kindCapability, true},
		{"*:workers", kindJobWorker, false},
		{"*worker", kindJobWorker, true},
		{"*worker", kindJob, true}, // job:…worker
		{"j*", kindJob, true},
		{"j*", kindQueue, false},
		{"job:", kindJob, false}, // the id is not empty
		{"job:?", kindJob, true},
		{"job:a:b", kindJob, false},
		{"capability:a:b:workers", kindCapability, true},
		{"[jq]*", kindQueue, true},
		{"[jq]*", kindWorkerAlive, false},
		{"queue:x[:]", kindQueue, false},
		{"?????", kindJob, true},
		{"????", kindJob, false},
	}
	for _, tc := range tests {
		f := keyFamilies[tc.kind]
		if got := CompileGlob(tc.pattern).canMatchShape(f.head, f.tail, f.nameBytes()); got != tc.want {
			t.Errorf("%q can match %s…%s: %v, want %v", tc.pattern, f.head, f.tail, got, tc.want)
		}
	}
}

// FuzzGlob checks glob against the port of Redis's matcher, and that
// canMatchShape never rules out a key the pattern matches.
func FuzzGlob(f *testing.F) {
	for _, seed := range [][2]string{
		{"worker:*:alive", "worker:w-1:alive"}, {"job:[a-c]?*", "job:b1"}, {"*\\", "a\\"},
		{"[^:]*:worker", "job:x:worker"}, {"capability:*", "capability:a:b:workers"}, {"[", ""},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, pattern, name string) {
		if len(pattern) > 64 || len(name) > 64 {
			return // the reference backtracks exponentially
		}
		g := CompileGlob(pattern)
		if got, want := g.Match(name), redisMatch(pattern, name); got != want {
			t.Fatalf("glob %q match %q = %v, Redis says %v", pattern, name, got, want)
		}
		if name == "" {
			return
		}
		for kind, fam := range keyFamilies {
			if !fam.colonInName && containsByte(name, ':') {
				continue
			}
			key := fam.head + name + fam.tail
			if g.Match(key) && !g.canMatchShape(fam.head, fam.tail, fam.nameBytes()) {
				t.Fatalf("%q matches %q but canMatchShape rules out kind %d", pattern, key, kind)
			}
		}
	})
}

func containsByte(s string, c byte) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return true
		}
	}
	return false
}
