package commands

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// readUpdateDoc reads the fields agq interprets from a JOB.UPDATE document
// that is valid JSON, in one pass over its top level, without reflection:
// each report of a busy worker comes through here. It answers false for
// anything it leaves to encoding/json (not an object, a field of another
// type, a key that differs from one of the fields only in case, an escape
// in a key), which then reads the document or words what is wrong.
func readUpdateDoc(body []byte, doc *updateDoc) bool {
	if !json.Valid(body) {
		return false
	}
	*doc = updateDoc{}
	i := skipSpace(body, 0)
	if i == len(body) || body[i] != '{' {
		return false
	}
	for i = skipSpace(body, i+1); i < len(body) && body[i] != '}'; {
		if body[i] == ',' {
			i = skipSpace(body, i+1)
		}
		end := closingQuote(body, i)
		key := body[i+1 : end]
		i = skipSpace(body, end+1) + 1 // the colon
		i = skipSpace(body, i)
		from := i
		i = valueEnd(body, i)
		v := body[from:i]
		i = skipSpace(body, i)
		if !readUpdateField(key, v, doc) {
			return false
		}
	}
	return true
}

// readUpdateField reads one field into doc; false when encoding/json
// must.
func readUpdateField(key, v []byte, doc *updateDoc) bool {
	switch string(key) {
	case "status":
		return plainJSONString(v, &doc.Status)
	case "error":
		return plainJSONString(v, &doc.Error)
	case "delivery":
		return plainJSONString(v, &doc.Delivery)
	case "attempt":
		if string(v) == "null" {
			return true
		}
		n, err := strconv.Atoi(string(v))
		doc.Attempt = n
		return err == nil
	case "retryable":
		switch string(v) {
		case "null":
			doc.Retryable = nil
		case "true", "false":
			b := string(v) == "true"
			doc.Retryable = &b
		default:
			return false
		}
		return true
	case "seconds":
		if string(v) == "null" {
			doc.Seconds = nil
			return true
		}
		f, err := strconv.ParseFloat(string(v), 64)
		doc.Seconds = &f
		return err == nil
	}
	for _, name := range []string{"status", "error", "delivery", "attempt", "retryable", "seconds"} {
		if strings.EqualFold(name, string(key)) {
			return false // encoding/json would read it as that field
		}
	}
	return bytes.IndexByte(key, '\\') < 0 // an escaped key might spell one
}

// plainJSONString reads a string (or null) into p: at once when it has
// neither escapes nor invalid UTF-8, through encoding/json when it has.
func plainJSONString(v []byte, p *string) bool {
	switch {
	case string(v) == "null":
		return true
	case len(v) < 2 || v[0] != '"':
		return false
	case bytes.IndexByte(v, '\\') >= 0 || !utf8.Valid(v):
		return json.Unmarshal(v, p) == nil
	}
	*p = string(v[1 : len(v)-1])
	return true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// closingQuote is the index of the quote closing the string that opens at
// b[i], in valid JSON.
func closingQuote(b []byte, i int) int {
	for i++; b[i] != '"'; i++ {
		if b[i] == '\\' {
			i++
		}
	}
	return i
}

// valueEnd is the index just past the value that starts at b[i], in valid
// JSON.
func valueEnd(b []byte, i int) int {
	switch b[i] {
	case '"':
		return closingQuote(b, i) + 1
	case '{', '[':
		depth := 0
		for ; ; i++ {
			switch b[i] {
			case '"':
				i = closingQuote(b, i)
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
	default:
		for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\t' && b[i] != '\n' && b[i] != '\r' {
			i++
		}
		return i
	}
}
