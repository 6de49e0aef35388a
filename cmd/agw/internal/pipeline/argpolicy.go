package pipeline

import (
	"strings"
)

// argPolicy describes just enough of a tool's GNU getopt syntax to find the
// options and operands agw refuses: those that write a file of the
// submitter's choosing, run another program, or change the machine. GNU
// tools accept options anywhere before "--" and any unambiguous prefix of a
// long option (--co for --compress-program), so the checks do the same.
//
// The parse errs on the side of refusing: every argument before "--" is
// checked, even one that is really the value of the option before it, so
// "sort -t -o" is refused although sort would read "-o" as the separator.
// The tool's environment never carries POSIXLY_CORRECT (see childEnv), so
// options after operands are options, as assumed here.
type argPolicy struct {
	shortWithArg string            // short options whose value is attached or the next argument
	shortOptArg  string            // short options whose optional value can only be attached (date -I)
	longWithArg  []string          // long options whose value is the next argument unless written --name=value
	refusedShort map[byte]string   // option letter → why it is refused
	refusedLong  map[string]string // long option name → why it is refused
	maxOperands  int               // -1: any number
	tooMany      string            // why more operands are refused
	operand      func(string) string
}

const (
	whyWritesFile = "writes a file; the job's output is what the pipeline prints"
	whyRunsProg   = "runs another program"
	whySetsClock  = "sets the system clock"
)

// argPolicies holds the policy of each offered tool that needs one. GNU
// sort's short options with a value are k, o, S, t, T and y; y is left out
// of shortWithArg on purpose, so that "-yo/file" is refused even though
// sort would read "o/file" as the value of -y.
var argPolicies = map[string]argPolicy{
	"sort": {
		shortWithArg: "kStT",
		refusedShort: map[byte]string{'o': whyWritesFile},
		refusedLong:  map[string]string{"output": whyWritesFile, "compress-program": whyRunsProg},
		maxOperands:  -1,
	},
	"uniq": {
		shortWithArg: "fsw",
		longWithArg:  []string{"skip-fields", "skip-chars", "check-chars"},
		maxOperands:  1,
		tooMany:      "uniq's second operand is an output file it " + whyWritesFile,
	},
	"date": {
		shortWithArg: "dfr",
		shortOptArg:  "I",
		refusedShort: map[byte]string{'s': whySetsClock},
		refusedLong:  map[string]string{"set": whySetsClock},
		maxOperands:  -1,
		operand: func(a string) string {
			if strings.HasPrefix(a, "+") {
				return ""
			}
			return "an operand other than +FORMAT " + whySetsClock
		},
	},
}

// checkArgs applies tool's policy, if it has one, to args.
func checkArgs(task int, tool string, args []string) error {
	p, ok := argPolicies[tool]
	if !ok {
		return nil
	}
	operands := 0
	valueNext, endOfOptions := false, false
	for _, a := range args {
		if endOfOptions || a == "-" || !strings.HasPrefix(a, "-") {
			if valueNext {
				valueNext = false
				continue
			}
			operands++
			if p.operand != nil {
				if why := p.operand(a); why != "" {
					return refused(task, tool, "%s %q: %s", tool, a, why)
				}
			}
			continue
		}
		isValue := valueNext
		valueNext = false
		if a == "--" {
			if !isValue {
				endOfOptions = true
			}
			continue
		}
		if name, ok := strings.CutPrefix(a, "--"); ok {
			name, _, hasValue := strings.Cut(name, "=")
			for long, why := range p.refusedLong {
				if strings.HasPrefix(long, name) {
					return refused(task, tool, "%s --%s %s", tool, long, why)
				}
			}
			valueNext = !isValue && !hasValue && prefixOfAny(name, p.longWithArg)
			continue
		}
		for j := 1; j < len(a); j++ {
			c := a[j]
			if why, ok := p.refusedShort[c]; ok {
				return refused(task, tool, "%s -%c %s", tool, c, why)
			}
			if strings.IndexByte(p.shortOptArg, c) >= 0 {
				break
			}
			if strings.IndexByte(p.shortWithArg, c) >= 0 {
				valueNext = !isValue && j == len(a)-1
				break
			}
		}
	}
	if p.maxOperands >= 0 && operands > p.maxOperands {
		return refused(task, tool, "%s", p.tooMany)
	}
	return nil
}

func prefixOfAny(name string, longs []string) bool {
	for _, l := range longs {
		if strings.HasPrefix(l, name) {
			return true
		}
	}
	return false
}
