package commands

import (
	"bytes"
	"cmp"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// unstorableText finds, in valid JSON, the first string that PostgreSQL
// cannot store — one with a \u0000 escape, or a \uD800-\uDFFF escape that is
// not half of a surrogate pair — and returns its field path (payload.s,
// items[2], "" for the document itself) and what is wrong. Such text is
// refused, never changed: a job must be stored as it was sent.
func unstorableText(raw []byte) (path, problem string, found bool) {
	type level struct {
		object bool
		key    string
		index  int
	}
	var stack []level
	pathOf := func() string {
		var b strings.Builder
		for _, l := range stack {
			if l.object {
				if b.Len() > 0 {
					b.WriteByte('.')
				}
				b.WriteString(l.key)
			} else {
				b.WriteString("[" + strconv.Itoa(l.index) + "]")
			}
		}
		return b.String()
	}
	expectKey := false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; c {
		case '{':
			stack = append(stack, level{object: true})
			expectKey = true
		case '[':
			stack = append(stack, level{})
		case '}', ']':
			stack = stack[:len(stack)-1]
		case ',':
			if top := len(stack) - 1; top >= 0 {
				if stack[top].object {
					expectKey = true
				} else {
					stack[top].index++
				}
			}
		case '"':
			end, bad := scanString(raw, i)
			if expectKey {
				stack[len(stack)-1].key = string(raw[i+1 : end])
				expectKey = false
				if bad != "" {
					return pathOf(), "a key " + bad, true
				}
			} else if bad != "" {
				return pathOf(), bad, true
			}
			i = end
		}
	}
	return "", "", false
}

// scanString returns the index of the quote closing the string opened at
// raw[start], and what in it PostgreSQL cannot store, if anything.
func scanString(raw []byte, start int) (end int, bad string) {
	for i := start + 1; i < len(raw); i++ {
		switch raw[i] {
		case '"':
			return i, bad
		case '\\':
			if raw[i+1] != 'u' {
				i++
				continue
			}
			code, _ := hex4(raw[i+2 : i+6])
			switch {
			case code == 0:
				bad = cmp.Or(bad, `contains \u0000`)
			case code >= 0xD800 && code <= 0xDBFF:
				if i+12 <= len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' {
					if low, ok := hex4(raw[i+8 : i+12]); ok && low >= 0xDC00 && low <= 0xDFFF {
						i += 11 // a valid pair
						continue
					}
				}
				bad = cmp.Or(bad, fmt.Sprintf(`contains \u%04x, half of a surrogate pair`, code))
			case code >= 0xDC00 && code <= 0xDFFF:
				bad = cmp.Or(bad, fmt.Sprintf(`contains \u%04x, half of a surrogate pair`, code))
			}
			i += 5
		}
	}
	return len(raw), bad
}

// textError words unstorableText's finding for a reply, or is nil.
func textError(raw []byte) error {
	if !utf8.Valid(raw) {
		return fmt.Errorf("not valid UTF-8")
	}
	if !bytes.Contains(raw, []byte(`\u`)) {
		return nil // only an escape can spell text PostgreSQL cannot store
	}
	path, problem, found := unstorableText(raw)
	if !found {
		return nil
	}
	if path == "" {
		return fmt.Errorf("the document %s, which cannot be stored", problem)
	}
	return fmt.Errorf("%s %s, which cannot be stored", path, problem)
}

func hex4(b []byte) (uint16, bool) {
	var v uint16
	for _, c := range b {
		switch {
		case '0' <= c && c <= '9':
			v = v<<4 | uint16(c-'0')
		case 'a' <= c && c <= 'f':
			v = v<<4 | uint16(c-'a'+10)
		case 'A' <= c && c <= 'F':
			v = v<<4 | uint16(c-'A'+10)
		default:
			return 0, false
		}
	}
	return v, true
}
