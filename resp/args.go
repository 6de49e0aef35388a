package resp

import (
	"math"
	"strconv"
	"strings"
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

// Is reports whether arg equals the keyword, ignoring ASCII case.
func Is(arg []byte, keyword string) bool {
	return strings.EqualFold(string(arg), keyword)
}
