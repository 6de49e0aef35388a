package resp

import (
	"strings"
	"testing"

	"github.com/tidwall/redcon"
)

// guardFrameVerdict feeds input whole and one byte at a time and returns the
// reason it was rejected ("" if not) and how many bytes were accepted.
func guardFrameVerdict(t *testing.T, lim Limits, input string) (string, int64) {
	t.Helper()
	whole := guardFrame{lim: lim.withDefaults()}
	whole.feed([]byte(input))
	bytewise := guardFrame{lim: lim.withDefaults()}
	for i := 0; i < len(input) && bytewise.bad == ""; i++ {
		bytewise.feed([]byte{input[i]})
	}
	if whole.bad != bytewise.bad || whole.pos != bytewise.pos || whole.cmdStart != bytewise.cmdStart {
		t.Fatalf("whole: %q at %d, bytewise: %q at %d", whole.bad, whole.pos, bytewise.bad, bytewise.pos)
	}
	return whole.bad, whole.pos
}

func TestGuardFrame(t *testing.T) {
	t.Parallel()
	lim := Limits{MaxArgs: 4, MaxBulk: 10, MaxInline: 32, MaxCommand: 40}
	tests := []struct {
		name, input, want string
	}{
		{"AcceptsACompleteCommand", "*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n", ""},
		{"AcceptsAnEmptyBulk", "*1\r\n$0\r\n\r\n", ""},
		{"AcceptsEmptyInlineLines", "\r\n\n\r\n", ""},
		{"AcceptsTheLargestLimits", "*4\r\n$10\r\n0123456789\r\n$1\r\n1\r\n$0\r\n\r\n$0\r\n\r\n", ""},
		{"RejectsAnEmptyCount", "*\r\n", guardBadMultibulkLen},
		{"RejectsASignedCount", "*+1\r\n", guardBadMultibulkLen},
		{"RejectsALeadingZero", "*01\r\n", guardBadMultibulkLen},
		{"RejectsACountOverTheLimit", "*5\r\n", guardTooManyArgs},
		{"RejectsACountThatOverflows", "*99999999999999999999999\r\n", guardTooManyArgs},
		{"RejectsAMissingLF", "*1\rx", guardBadMultibulkLen},
		{"RejectsAnEmptyBulkLength", "*1\r\n$\r\n\r\n", guardBadBulkLen},
		{"RejectsANegativeBulkLength", "*1\r\n$-1\r\n", guardBadBulkLen},
		{"RejectsABulkOverTheLimit", "*1\r\n$11\r\n", guardBulkTooBig},
		{"RejectsAControlByteForDollar", "*1\r\n\x00", `expected '$', got '\x00'`},
		{"RejectsTooLongACommand", "*4\r\n$10\r\n0123456789\r\n$10\r\n0123456789\r\n$1\r\n", guardCommandTooBig},
		{"RejectsABulkThatWouldMakeTheCommandTooLong", "*3\r\n$10\r\n0123456789\r\n$2\r\nab\r\n$9\r\n", guardCommandTooBig},
		{"RejectsTooLongAnInlineLine", strings.Repeat("a", 33), guardInlineTooBig},
		{"AcceptsALongestInlineLine", strings.Repeat("a", 31) + "\r\n", ""},
		{"RejectsAnInlineLineWithTooManyArguments", "a b c 'd' e\r\n", guardTooManyArgs},
		{"CountsQuotedSpacesAsOneArgument", "a \"b c d e\" 'f g'\r\n", ""},
		{"RejectsAnUnclosedQuote", "a \"b\r\n", guardUnbalanced},
		{"RejectsAQuoteInsideAWord", "a b\"c\"\r\n", guardUnbalanced},
		{"RejectsAClosingQuoteFollowedByAWord", "a \"b\"c\r\n", guardUnbalanced},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got, _ := guardFrameVerdict(t, lim, tc.input); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// redcon's inline tokenizer allocates about the rest of the line per token,
// so a 64 KiB line of one-letter words would cost it a gigabyte.
func TestGuardFrameBoundsInlineTokenizerCost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, input, want string
	}{
		{"RejectsALongLineOfShortWords", strings.Repeat("a ", 20000) + "\r\n", guardTooManyArgs},
		{"AcceptsALongLineOfFewWords", "SET key " + strings.Repeat("v", 60000) + "\r\n", ""},
		{"AcceptsSpacesInsideQuotes", "SET key \"" + strings.Repeat("v ", 30000) + "\"\r\n", ""},
		{"AcceptsAShortLineOfManyWords", strings.Repeat("a ", 128) + "\r\n", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, _ := guardFrameVerdict(t, Limits{}, tc.input)
			if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			if got != "" {
				return
			}
			// What the guard accepts, redcon parses.
			cmd, err := redcon.Parse([]byte(tc.input))
			if err != nil || len(cmd.Args) == 0 {
				t.Fatalf("redcon: %d args, %v", len(cmd.Args), err)
			}
		})
	}
}

// The guard's copy of redcon's inline tokenizer must agree with redcon on
// every short line over the bytes that matter to it.
func TestGuardFrameCountsInlineArgumentsAsRedconDoes(t *testing.T) {
	t.Parallel()
	const alphabet = "a \"'\\\r"
	line := make([]byte, 0, 8)
	var walk func()
	walk = func() {
		f := guardFrame{lim: Limits{MaxArgs: 1 << 20}.withDefaults()}
		f.feed(append(line, '\n'))
		cmd, err := redcon.Parse(append(line, '\n'))
		var got, want string
		switch {
		case f.bad != "":
			got = f.bad
		default:
			got = strings.Repeat("+", int(f.line.args))
		}
		switch {
		case err != nil && err.Error() == "incomplete command": // no arguments
		case err != nil:
			want = strings.TrimPrefix(err.Error(), "Protocol error: ")
		default:
			want = strings.Repeat("+", len(cmd.Args))
		}
		if got != want {
			t.Fatalf("line %q: guard %q, redcon %q", line, got, want)
		}
		if len(line) == cap(line)-1 {
			return
		}
		for i := range len(alphabet) {
			line = append(line, alphabet[i])
			walk()
			line = line[:len(line)-1]
		}
	}
	walk()
}
