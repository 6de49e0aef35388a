package resp

import (
	"math"
	"strconv"
	"time"
)

// ParseInt parses a decimal integer argument.
func ParseInt(arg []byte) (int64, error) {
	n, err := strconv.ParseInt(string(arg), 10, 64)
	if err != nil {
		return 0, ErrNotInteger
	}
	return n, nil
}

// ParseTimeout parses a blocking timeout in seconds, fractional allowed, as
// BRPOP does; 0 means forever and is returned as 0.
func ParseTimeout(arg []byte) (time.Duration, error) {
	f, err := strconv.ParseFloat(string(arg), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, ErrTimeout
	}
	if f < 0 {
		return 0, ErrNegativeTime
	}
	if f > float64(math.MaxInt64/int64(time.Second)) {
		return 0, ErrTimeout
	}
	return time.Duration(f * float64(time.Second)), nil
}

// Keywords are compared one way, ASCII only, as Redis compares them: a
// letter outside ASCII never folds into one (strings.EqualFold would fold
// "ſ" into "S").

// Is reports whether arg equals the keyword, ignoring ASCII case, without
// allocating.
func Is(arg []byte, keyword string) bool {
	if len(arg) != len(keyword) {
		return false
	}
	for i, c := range arg {
		if lowerASCII(c) != lowerASCII(keyword[i]) {
			return false
		}
	}
	return true
}

// Upper is arg with its ASCII letters in upper case, for a switch over
// keywords.
func Upper(arg []byte) string {
	out := []byte(string(arg))
	for i, c := range out {
		if 'a' <= c && c <= 'z' {
			out[i] = c - ('a' - 'A')
		}
	}
	return string(out)
}

// Lower is arg with its ASCII letters in lower case, its other bytes
// intact (an unknown command's name is echoed so).
func Lower(arg []byte) string {
	out := []byte(string(arg))
	for i, c := range out {
		out[i] = lowerASCII(c)
	}
	return string(out)
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + ('a' - 'A')
	}
	return c
}
