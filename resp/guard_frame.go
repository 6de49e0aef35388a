package resp

import "fmt"

// Reasons the guard rejects input, worded as Redis words them.
const (
	guardBadMultibulkLen = "invalid multibulk length"
	guardBadBulkLen      = "invalid bulk length"
	guardInlineTooBig    = "too big inline request"
	guardTooManyArgs     = "too many arguments"
	guardBulkTooBig      = "bulk length exceeds limit"
	guardCommandTooBig   = "command too large"
	guardBudgetSpent     = "server input buffers are full; retry later"
	guardUnbalanced      = "unbalanced quotes in request"
)

// redcon's inline tokenizer allocates a buffer the size of the rest of the
// line for every token, so its cost grows with tokens × line length. A line
// may cost this many times its length, plus a slack that lets short lines
// hold any number of tokens.
const (
	guardInlineCostFactor = 32
	guardInlineCostSlack  = 64 << 10
)

type guardState uint8

const (
	guardCmdStart guardState = iota
	guardInline
	guardCount
	guardCountLF
	guardDollar
	guardBulkLen
	guardBulkLenLF
	guardBody
	guardBodyCR
	guardBodyLF
)

// guardFrame is a streaming validator of RESP framing. It keeps O(1) state,
// so commands may arrive split anywhere, and it never allocates in
// proportion to a declared length.
type guardFrame struct {
	lim      Limits
	state    guardState
	pos      int64 // stream offset of the next byte
	cmdStart int64 // stream offset where the current command began
	reserved int64 // bytes taken from lim.Budget for the largest command so far
	bad      string

	num    int64 // number being parsed
	digits int
	args   int64 // bulks still expected
	body   int64 // body bytes still expected

	line guardInlineLine
}

// guardInlineLine follows redcon v1.6.2's inline tokenizer (readCommands in
// redcon.go) closely enough to count the arguments and allocation it will
// produce for the line.
type guardInlineLine struct {
	size      int64 // bytes before '\n', including any '\r'
	chars     int64 // bytes tokenized so far
	pendingCR bool  // a '\r' that is dropped if '\n' follows
	quote     byte
	escape    bool
	tokenLen  int64
	atStart   bool // first byte since the tokenizer restarted
	needSpace bool // a closing quote must be followed by a space
	doomed    bool
	args      int64
	restarts  int64
	restartAt int64 // sum of the offsets the tokenizer restarted from
}

// feed validates b, the bytes that follow those already fed. It returns how
// many bytes it accepted: all of them, or those before the first violation,
// which it records in f.bad. It must not be called after a violation.
func (f *guardFrame) feed(b []byte) int {
	for i := 0; i < len(b); i++ {
		if f.state == guardBody {
			skip := min(f.body, int64(len(b)-i))
			f.body -= skip
			f.pos += skip
			i += int(skip) - 1
			if f.body == 0 {
				f.state = guardBodyCR
			}
			continue
		}
		if !f.step(b[i]) {
			return i
		}
		f.pos++
	}
	return len(b)
}

// step consumes one byte outside a bulk body and reports whether it is valid.
func (f *guardFrame) step(c byte) bool {
	switch f.state {
	case guardCmdStart:
		f.cmdStart = f.pos
		if c == '*' {
			f.state, f.num, f.digits = guardCount, 0, 0
			return true
		}
		f.state, f.line = guardInline, guardInlineLine{atStart: true}
		return f.inline(c)
	case guardInline:
		return f.inline(c)
	}
	if f.pos-f.cmdStart >= f.lim.MaxCommand {
		return f.fail(guardCommandTooBig)
	}
	switch f.state {
	case guardCount: // an array of at least one bulk
		return f.length(c, int64(f.lim.MaxArgs), f.num > 0, guardCountLF, guardBadMultibulkLen, guardTooManyArgs)
	case guardCountLF:
		if c != '\n' {
			return f.fail(guardBadMultibulkLen)
		}
		f.state, f.args = guardDollar, f.num
	case guardDollar:
		if c != '$' {
			return f.fail(fmt.Sprintf("expected '$', got '%s'", guardPrintable(c)))
		}
		f.state, f.num, f.digits = guardBulkLen, 0, 0
	case guardBulkLen: // a bulk, empty or not
		return f.length(c, f.lim.MaxBulk, f.digits > 0, guardBulkLenLF, guardBadBulkLen, guardBulkTooBig)
	case guardBulkLenLF:
		if c != '\n' {
			return f.fail(guardBadBulkLen)
		}
		// Reject now rather than after the client streamed the body.
		if f.pos+1-f.cmdStart+f.num+2 > f.lim.MaxCommand {
			return f.fail(guardCommandTooBig)
		}
		if !f.reserve(f.pos + 1 - f.cmdStart + f.num + 2) {
			return f.fail(guardBudgetSpent)
		}
		f.state, f.body = guardBody, f.num
		if f.num == 0 {
			f.state = guardBodyCR
		}
	case guardBodyCR:
		if c != '\r' {
			return f.fail(guardBadBulkLen)
		}
		f.state = guardBodyLF
	case guardBodyLF:
		if c != '\n' {
			return f.fail(guardBadBulkLen)
		}
		f.args--
		f.state = guardDollar
		if f.args == 0 {
			f.state, f.cmdStart = guardCmdStart, f.pos+1
		}
	}
	return true
}

// length reads c in a length up to limit: a digit, or the '\r' that ends
// it, where complete says it may end, moving on to state then.
func (f *guardFrame) length(c byte, limit int64, complete bool, then guardState, invalid, tooBig string) bool {
	switch {
	case c >= '0' && c <= '9':
		return f.digit(c, limit, invalid, tooBig)
	case c == '\r' && complete:
		f.state = then
		return true
	}
	return f.fail(invalid)
}

// digit appends c to the number being parsed. Like Redis, it refuses
// leading zeros, which also bounds how many digits a line can hold.
func (f *guardFrame) digit(c byte, limit int64, invalid, tooBig string) bool {
	if f.digits > 0 && f.num == 0 {
		return f.fail(invalid)
	}
	d := int64(c - '0')
	if f.num > limit/10 || f.num*10 > limit-d {
		return f.fail(tooBig)
	}
	f.num = f.num*10 + d
	f.digits++
	return true
}

func (f *guardFrame) inline(c byte) bool {
	l := &f.line
	if c == '\n' {
		if l.pendingCR {
			l.pendingCR = false // redcon strips a '\r' before the '\n'
		}
		if reason := l.end(f.lim); reason != "" {
			return f.fail(reason)
		}
		f.state, f.cmdStart = guardCmdStart, f.pos+1
		return true
	}
	l.size++
	if l.size > int64(f.lim.MaxInline) {
		return f.fail(guardInlineTooBig)
	}
	if l.pendingCR {
		l.pendingCR = false
		l.token('\r')
	}
	if c == '\r' {
		l.pendingCR = true
		return true
	}
	l.token(c)
	return true
}

// token mirrors one step of redcon's tokenizer over the line's bytes.
func (l *guardInlineLine) token(c byte) {
	at := l.chars
	l.chars++
	if l.doomed {
		return
	}
	if l.needSpace {
		l.needSpace = false
		if c != ' ' {
			l.doomed = true
			return
		}
	}
	start := l.atStart
	l.atStart = false
	switch {
	case l.quote == 0 && c == ' ':
		if l.tokenLen > 0 {
			l.args++
		}
		l.restart(at)
	case l.quote == 0 && (c == '"' || c == '\''):
		if !start {
			l.doomed = true
			return
		}
		l.quote = c
		l.restart(at)
	case l.quote == 0:
		l.tokenLen++
	case l.escape:
		l.escape = false
		l.tokenLen++
	case c == l.quote:
		l.quote = 0
		l.args++
		l.restart(at)
		l.needSpace = true
	case c == '\\':
		l.escape = true
	default:
		l.tokenLen++
	}
}

func (l *guardInlineLine) restart(at int64) {
	l.restarts++
	l.restartAt += at + 1
	l.tokenLen = 0
	l.atStart = true
}

// end finishes the line and returns why redcon must not parse it, if so.
func (l *guardInlineLine) end(lim Limits) string {
	if l.quote != 0 || l.doomed {
		return guardUnbalanced
	}
	if l.tokenLen > 0 {
		l.args++
	}
	if l.args > int64(lim.MaxArgs) {
		return guardTooManyArgs
	}
	// Each restart allocates the rest of the line, and so does the start.
	cost := (l.restarts+1)*l.chars - l.restartAt
	if cost > guardInlineCostFactor*l.chars+guardInlineCostSlack {
		return guardTooManyArgs
	}
	return ""
}

func (f *guardFrame) fail(reason string) bool {
	f.bad = reason
	f.release()
	return false
}

// guardPrintable keeps the error line a single line whatever the byte was.
func guardPrintable(c byte) string {
	if c >= ' ' && c <= '~' {
		return string(c)
	}
	return fmt.Sprintf("\\x%02x", c)
}
