package client

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// decodeJob reads a delivered job into msg. agq writes deliveries as a flat
// object of strings, numbers and JSON values, so the common case is read
// in one pass without reflection: strings without escapes are slices of
// raw, and the JSON values slices of one copy of it. Anything else (an
// escape in a key, an unexpected token) is left to encoding/json, which
// also names what is wrong.
func decodeJob(raw string, msg *jobMessage) error {
	if decodeFlat(raw, msg) {
		return nil
	}
	*msg = jobMessage{raw: raw}
	return json.Unmarshal([]byte(raw), msg)
}

// decodeFlat is decodeJob's single pass; false when it met something it
// leaves to encoding/json.
func decodeFlat(raw string, msg *jobMessage) bool {
	*msg = jobMessage{raw: raw}
	var bytes []byte // raw's copy, made when a JSON value is kept
	s := scanner{s: raw}
	if !s.byte('{') {
		return false
	}
	if s.byte('}') {
		return s.end()
	}
	for {
		key, ok := s.plainString()
		if !ok || !s.byte(':') {
			return false
		}
		s.space()
		from := s.i
		if !s.value() {
			return false
		}
		v := raw[from:s.i]
		switch key {
		case "job_id":
			ok = str(v, &msg.JobID)
		case "queue":
			ok = str(v, &msg.Queue)
		case "type":
			ok = str(v, &msg.Type)
		case "delivery":
			ok = str(v, &msg.Delivery)
		case "traceparent":
			ok = str(v, &msg.TraceParent)
		case "tracestate":
			ok = str(v, &msg.TraceState)
		case "priority":
			ok = integer(v, &msg.Priority)
		case "attempt":
			ok = integer(v, &msg.Attempt)
		case "max_attempts":
			ok = integer(v, &msg.MaxAttempts)
		case "timeout_seconds":
			ok = number(v, &msg.TimeoutSeconds)
		case "requires":
			switch v {
			case "null":
			case "[]":
				msg.Requires = []string{}
			default:
				ok = strs(v, &msg.Requires) || json.Unmarshal([]byte(v), &msg.Requires) == nil
			}
		case "plan", "inputs", "payload", "parents":
			if bytes == nil {
				bytes = []byte(raw)
			}
			r := json.RawMessage(bytes[from:s.i:s.i])
			switch key {
			case "plan":
				msg.Plan = r
			case "inputs":
				msg.Inputs = r
			case "payload":
				msg.Payload = r
			default:
				msg.Parents = r
			}
		default:
			// encoding/json matches keys regardless of case: such a key
			// is its to read.
			ok = !knownKeyFold(key)
		}
		if !ok {
			return false
		}
		if s.byte(',') {
			continue
		}
		return s.byte('}') && s.end()
	}
}

// str reads a JSON string (or null) into p.
func str(v string, p *string) bool {
	switch {
	case v == "null":
		return true
	case len(v) >= 2 && v[0] == '"' && !hasEscape(v) && utf8.ValidString(v):
		*p = v[1 : len(v)-1]
		return true
	default:
		return json.Unmarshal([]byte(v), p) == nil
	}
}

var jobKeys = []string{"job_id", "queue", "type", "delivery", "traceparent", "tracestate", "priority", "attempt",
	"max_attempts", "timeout_seconds", "requires", "plan", "inputs", "payload", "parents"}

func knownKeyFold(key string) bool {
	for _, k := range jobKeys {
		if strings.EqualFold(k, key) {
			return true
		}
	}
	return false
}

// strs reads an array of strings without escapes into p; false for
// anything else, left to encoding/json.
func strs(v string, p *[]string) bool {
	s := scanner{s: v}
	if !s.byte('[') {
		return false
	}
	var out []string
	for {
		item, ok := s.plainString()
		if !ok {
			return false
		}
		out = append(out, item)
		if s.byte(',') {
			continue
		}
		if !s.byte(']') || !s.end() {
			return false
		}
		*p = out
		return true
	}
}

func integer(v string, p *int) bool {
	if v == "null" {
		return true
	}
	n, err := strconv.Atoi(v)
	*p = n
	return err == nil
}

func number(v string, p *float64) bool {
	if v == "null" {
		return true
	}
	f, err := strconv.ParseFloat(v, 64)
	*p = f
	return err == nil
}

func hasEscape(v string) bool {
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' || v[i] < 0x20 {
			return true
		}
	}
	return false
}

// scanner walks a JSON text; it finds where values end and checks their
// brackets and strings, not every rule of JSON: what it keeps as a JSON
// value is what agq sent, read again by whoever decodes it.
type scanner struct {
	s string
	i int
}

func (s *scanner) space() {
	for s.i < len(s.s) {
		switch s.s[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// byte consumes c after any space.
func (s *scanner) byte(c byte) bool {
	s.space()
	if s.i < len(s.s) && s.s[s.i] == c {
		s.i++
		return true
	}
	return false
}

func (s *scanner) end() bool {
	s.space()
	return s.i == len(s.s)
}

// plainString reads a string without escapes (an object's key).
func (s *scanner) plainString() (string, bool) {
	s.space()
	from := s.i
	if !s.str() {
		return "", false
	}
	v := s.s[from:s.i]
	if hasEscape(v) || !utf8.ValidString(v) {
		return "", false
	}
	return v[1 : len(v)-1], true
}

// str moves past a string, escapes included.
func (s *scanner) str() bool {
	if s.i >= len(s.s) || s.s[s.i] != '"' {
		return false
	}
	for s.i++; s.i < len(s.s); s.i++ {
		switch c := s.s[s.i]; {
		case c == '\\':
			s.i++
		case c == '"':
			s.i++
			return true
		case c < 0x20:
			return false
		}
	}
	return false
}

// value moves past one value.
func (s *scanner) value() bool {
	if s.i >= len(s.s) {
		return false
	}
	switch s.s[s.i] {
	case '"':
		return s.str()
	case '{', '[':
		depth := 0
		for s.i < len(s.s) {
			switch s.s[s.i] {
			case '"':
				if !s.str() {
					return false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.i++
					return true
				}
			}
			s.i++
		}
		return false
	default:
		from := s.i
		for s.i < len(s.s) {
			c := s.s[s.i]
			if c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\n' || c == '\r' {
				break
			}
			s.i++
		}
		return s.i > from
	}
}
