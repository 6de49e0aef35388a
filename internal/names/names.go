// Package names holds the rules for the names clients give: job ids,
// queues, schedules, workers, principals and job types, each written once.
// It imports nothing of agq, so that every layer checks a name the same way.
package names

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Rule is what a job id or a queue name must be.
const Rule = "1-128 letters, digits, '_', '-' or '.'"

// ScheduleRule is what a schedule name must be.
const ScheduleRule = "1-64 letters, digits, '_', '-' or '.'"

// StepRule is what a step id must be.
const StepRule = "1-128 letters, digits, '_', '-', '.' or ':'"

// Step reports whether s may be a step's id: StepRule.
func Step(s string) bool { return valid(s, 128, ".:") }

// Queue reports whether s is a queue name: Rule, ^[A-Za-z0-9_.-]{1,128}$,
// checked without a regular expression since every submitted job is.
func Queue(s string) bool { return valid(s, 128, ".") }

// JobID reports whether s may be a job's id: Rule.
func JobID(s string) bool { return valid(s, 128, ".") }

// Schedule reports whether s may name a schedule: ScheduleRule.
func Schedule(s string) bool { return valid(s, 64, ".") }

// Worker reports whether s may be a worker's id: ^[A-Za-z0-9_-]{1,64}$.
func Worker(s string) bool { return valid(s, 64, "") }

// Principal reports whether s may name a key's principal:
// ^[A-Za-z0-9_.@-]{1,64}$, and not "default" (AUTH's name for no name).
func Principal(s string) bool { return s != "default" && valid(s, 64, ".@") }

// JobType reports whether s may be a job type in TYPE.CONFIG: 1 to 128
// bytes of text without control characters.
func JobType(s string) bool {
	return s != "" && len(s) <= 128 && utf8.ValidString(s) && !strings.ContainsFunc(s, unicode.IsControl)
}

// valid reports whether s is 1 to most letters, digits, '_', '-' or the
// bytes of extra.
func valid(s string, most int, extra string) bool {
	if len(s) == 0 || len(s) > most {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || strings.IndexByte(extra, c) >= 0) {
			return false
		}
	}
	return true
}
