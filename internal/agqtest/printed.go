package agqtest

import (
	"regexp"
	"strings"
)

// placeholderRE finds the <name> parts of a printed line in the docs, which
// stand for any non-empty text (a key, an id, a timestamp).
var placeholderRE = regexp.MustCompile(`<[a-z][a-z0-9 _-]*>`)

// LineMatches reports whether got matches the line want as the docs print
// it, placeholders included.
func LineMatches(want, got string) bool {
	if !placeholderRE.MatchString(want) {
		return want == got
	}
	var re strings.Builder
	re.WriteString("^")
	last := 0
	for _, loc := range placeholderRE.FindAllStringIndex(want, -1) {
		re.WriteString(regexp.QuoteMeta(want[last:loc[0]]))
		re.WriteString(".+")
		last = loc[1]
	}
	re.WriteString(regexp.QuoteMeta(want[last:]))
	re.WriteString("$")
	return regexp.MustCompile(re.String()).MatchString(got)
}

// LinesMatch reports whether got matches the lines want as the docs print
// them, where a want line "..." stands for any number of lines. Trailing
// blanks of want lines do not count.
func LinesMatch(want, got []string) bool {
	if len(want) == 0 {
		return len(got) == 0
	}
	if strings.TrimSpace(want[0]) == "..." {
		for skip := 0; skip <= len(got); skip++ {
			if LinesMatch(want[1:], got[skip:]) {
				return true
			}
		}
		return false
	}
	return len(got) > 0 && LineMatches(strings.TrimRight(want[0], " \t"), got[0]) && LinesMatch(want[1:], got[1:])
}
