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
		if read, known := jobFields[key]; known {
			ok = read(msg, v)
		} else if field, known := jobValues[key]; known {
			if bytes == nil {
				bytes = []byte(raw)
			}
			*field(msg) = json.RawMessage(bytes[from:s.i:s.i])
		} else {
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

// jobFields are the fields of a delivery decodeFlat reads, by key, and how
// each is read; jobValues those it keeps as JSON, slices of one copy of
// the delivery.
var (
	jobFields = map[string]func(msg *jobMessage, v string) bool{
		"job_id":          func(m *jobMessage, v string) bool { return str(v, &m.JobID) },
		"queue":           func(m *jobMessage, v string) bool { return str(v, &m.Queue) },
		"type":            func(m *jobMessage, v string) bool { return str(v, &m.Type) },
		"delivery":        func(m *jobMessage, v string) bool { return str(v, &m.Delivery) },
		"traceparent":     func(m *jobMessage, v string) bool { return str(v, &m.TraceParent) },
		"tracestate":      func(m *jobMessage, v string) bool { return str(v, &m.TraceState) },
		"priority":        func(m *jobMessage, v string) bool { return integer(v, &m.Priority) },
		"attempt":         func(m *jobMessage, v string) bool { return integer(v, &m.Attempt) },
		"max_attempts":    func(m *jobMessage, v string) bool { return integer(v, &m.MaxAttempts) },
		"timeout_seconds": func(m *jobMessage, v string) bool { return number(v, &m.TimeoutSeconds) },
		"requires":        func(m *jobMessage, v string) bool { return requires(v, &m.Requires) },
	}
	jobValues = map[string]func(msg *jobMessage) *json.RawMessage{
		"plan":    func(m *jobMessage) *json.RawMessage { return &m.Plan },
		"inputs":  func(m *jobMessage) *json.RawMessage { return &m.Inputs },
		"payload": func(m *jobMessage) *json.RawMessage { return &m.Payload },
		"parents": func(m *jobMessage) *json.RawMessage { return &m.Parents },
	}
)

// knownKeyFold reports whether key is one of the fields but for case.
func knownKeyFold(key string) bool {
	for k := range jobFields {
		if strings.EqualFold(k, key) {
			return true
		}
	}
	for k := range jobValues {
		if strings.EqualFold(k, key) {
			return true
		}
	}
	return false
}

// requires reads an array of strings (or null) into p: at once when its
// strings have no escapes, through encoding/json when they have.
func requires(v string, p *[]string) bool {
	switch v {
	case "null":
		return true
	case "[]":
		*p = []string{}
		return true
	}
	return strs(v, p) || json.Unmarshal([]byte(v), p) == nil
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
