package resp

import (
	"errors"
	"fmt"
)

// Error is an error reply with a Redis error code: the first word of the
// line clients see (ERR, WRONGPASS, NOAUTH, NOPERM, CANCELLED…).
type Error struct {
	Code string
	Msg  string
}

// Error implements error.
func (e *Error) Error() string { return e.Code + " " + e.Msg }

// AppendRESP implements Reply.
func (e *Error) AppendRESP(b []byte, _ int) []byte {
	b = append(b, '-')
	b = appendLine(b, e.Error())
	return append(b, '\r', '\n')
}

// Errorf returns an error reply with the ERR code.
func Errorf(format string, args ...any) *Error {
	return &Error{Code: "ERR", Msg: fmt.Sprintf(format, args...)}
}

// CodeErrorf returns an error reply with the given code.
func CodeErrorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Errors shared by many commands.
var (
	ErrSyntax        = Errorf("syntax error")
	ErrNotInteger    = Errorf("value is not an integer or out of range")
	ErrTimeout       = Errorf("timeout is not a float or out of range")
	ErrNegativeTime  = Errorf("timeout is negative")
	ErrNoAuth        = CodeErrorf("NOAUTH", "Authentication required.")
	ErrWrongPass     = CodeErrorf("WRONGPASS", "invalid username-password pair or user is disabled.")
	ErrReadOnlyKeys  = Errorf("agq keys are read-only; use JOB.* commands")
	ErrPayloadTooBig = Errorf("payload too large")
)

// AsError returns err as an error reply when it is one (possibly wrapped).
func AsError(err error) (*Error, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e, true
	}
	return nil, false
}
