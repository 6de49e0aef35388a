package pubsub

import (
	"strconv"

	"github.com/agq/agq/internal/wakeup"
	"github.com/agq/agq/resp"
)

// messageRESP is a message as Redis sends it: an array in RESP2, a push in
// RESP3.
func messageRESP(m wakeup.Message, proto int) []byte {
	parts := []string{"message", m.Channel, m.Payload}
	if m.Pattern != "" {
		parts = []string{"pmessage", m.Pattern, m.Channel, m.Payload}
	}
	return pushRESP(proto, parts, -1)
}

// pushRESP encodes bulk strings, then count if it is not negative, as an
// array (RESP2) or a push (RESP3).
func pushRESP(proto int, parts []string, count int) []byte {
	n := len(parts)
	if count >= 0 {
		n++
	}
	kind := byte('*')
	if proto == 3 {
		kind = '>'
	}
	b := append([]byte{kind}, strconv.Itoa(n)...)
	b = append(b, "\r\n"...)
	for _, p := range parts {
		b = resp.BulkString(p).AppendRESP(b, proto)
	}
	if count >= 0 {
		b = resp.Int(count).AppendRESP(b, proto)
	}
	return b
}

// Pong is a subscribed RESP2 connection's answer to PING, as Redis gives
// it: an array of pong and the message.
func Pong(msg string) []byte { return pushRESP(2, []string{"pong", msg}, -1) }

// Unsubscribed answers UNSUBSCRIBE, or PUNSUBSCRIBE, from a connection that
// never subscribed: each name with a count of zero, as in Redis, or nil
// and zero when none is named.
func Unsubscribed(proto int, names []string, pattern bool) []byte {
	kind := unsubscribeKind(pattern)
	if len(names) == 0 {
		return nullUnsubscribe(proto, kind)
	}
	var out []byte
	for _, n := range names {
		out = append(out, pushRESP(proto, []string{kind, n}, 0)...)
	}
	return out
}

func unsubscribeKind(pattern bool) string {
	if pattern {
		return "punsubscribe"
	}
	return "unsubscribe"
}

// nullUnsubscribe is the answer to an UNSUBSCRIBE with nothing to leave.
func nullUnsubscribe(proto int, kind string) []byte {
	kindByte := byte('*')
	if proto == 3 {
		kindByte = '>'
	}
	b := append([]byte{kindByte}, "3\r\n"...)
	b = resp.BulkString(kind).AppendRESP(b, proto)
	b = resp.Nil.AppendRESP(b, proto)
	return resp.Int(0).AppendRESP(b, proto)
}
