// Package resp holds the wire-level pieces of agq's Redis protocol front door:
// reply values and their encoding, typed errors with Redis error codes,
// argument parsing helpers, and the input guard that bounds what a client may
// send before any parser allocates.
package resp

import (
	"strconv"
)

// Reply is a value that can be written to a client. Proto is the protocol
// version the connection negotiated (2 or 3); replies whose encoding differs
// between the two (nulls, maps) honour it.
type Reply interface {
	AppendRESP(b []byte, proto int) []byte
}

// SimpleString is a status reply such as +OK.
type SimpleString string

// OK is the most common status reply.
const OK = SimpleString("OK")

// AppendRESP implements Reply.
func (s SimpleString) AppendRESP(b []byte, _ int) []byte {
	b = append(b, '+')
	b = appendLine(b, string(s))
	return append(b, '\r', '\n')
}

// Int is an integer reply.
type Int int64

// AppendRESP implements Reply.
func (n Int) AppendRESP(b []byte, _ int) []byte { return appendHeader(b, ':', int64(n)) }

// Bulk is a binary-safe bulk string reply.
type Bulk []byte

// AppendRESP implements Reply.
func (s Bulk) AppendRESP(b []byte, _ int) []byte { return appendBulk(b, s) }

// BulkString is a bulk string reply built from a Go string.
type BulkString string

// AppendRESP implements Reply.
func (s BulkString) AppendRESP(b []byte, _ int) []byte { return appendBulk(b, s) }

type null struct{ array bool }

// Nil is the null reply: $-1 (RESP2) or _ (RESP3).
var Nil Reply = null{}

// NilArray is the null array reply a timed-out BRPOP answers: *-1 (RESP2) or _ (RESP3).
var NilArray Reply = null{array: true}

// AppendRESP implements Reply.
func (n null) AppendRESP(b []byte, proto int) []byte {
	switch {
	case proto >= 3:
		return append(b, '_', '\r', '\n')
	case n.array:
		return append(b, '*', '-', '1', '\r', '\n')
	default:
		return append(b, '$', '-', '1', '\r', '\n')
	}
}

// Array is an array reply.
type Array []Reply

// AppendRESP implements Reply.
func (a Array) AppendRESP(b []byte, proto int) []byte {
	b = appendHeader(b, '*', int64(len(a)))
	for _, r := range a {
		b = r.AppendRESP(b, proto)
	}
	return b
}

// StringArray is an array of bulk strings.
func StringArray(items []string) Array {
	return ArrayOf(items, func(s string) Reply { return BulkString(s) })
}

// ArrayOf is an array of the reply of each of items, in their order.
func ArrayOf[T any](items []T, reply func(T) Reply) Array {
	a := make(Array, len(items))
	for i, item := range items {
		a[i] = reply(item)
	}
	return a
}

// Map is an ordered map reply: a RESP3 map (%n) or, in RESP2, a flat array of
// keys and values, which is what Redis itself answers.
type Map []KV

// KV is one entry of a Map.
type KV struct {
	Key   string
	Value Reply
}

// AppendRESP implements Reply.
func (m Map) AppendRESP(b []byte, proto int) []byte {
	if proto >= 3 {
		b = appendHeader(b, '%', int64(len(m)))
	} else {
		b = appendHeader(b, '*', int64(2*len(m)))
	}
	for _, kv := range m {
		b = appendBulk(b, kv.Key)
		b = kv.Value.AppendRESP(b, proto)
	}
	return b
}

// appendHeader appends the head of a reply: its type byte and its length
// (an integer's value), and the line's end.
func appendHeader(b []byte, kind byte, n int64) []byte {
	b = append(b, kind)
	b = strconv.AppendInt(b, n, 10)
	return append(b, '\r', '\n')
}

// appendBulk appends s as a bulk string: its length, then its bytes.
func appendBulk[T ~string | ~[]byte](b []byte, s T) []byte {
	b = appendHeader(b, '$', int64(len(s)))
	b = append(b, s...)
	return append(b, '\r', '\n')
}

// appendLine appends s with CR and LF replaced, since a simple string or an
// error line cannot carry them.
func appendLine(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		b = append(b, c)
	}
	return b
}
