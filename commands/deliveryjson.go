package commands

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/agq/agq/records"
)

// appendDelivery appends what json.Marshal writes for d, byte for byte,
// without reflection: every popped job is written so. It answers false
// for what it leaves to json.Marshal: a job with parents, a string or a
// JSON value that encoding/json would escape (HTML characters, controls,
// invalid UTF-8), a JSON value that is not valid.
func appendDelivery(b []byte, d *delivery) ([]byte, bool) {
	if len(d.Parents) > 0 || d.ParentsTruncated {
		return b, false
	}
	ok := true
	str := func(key, v string) {
		if ok = ok && plainString(v); ok {
			b = append(append(append(append(b, key...), '"'), v...), '"')
		}
	}
	raw := func(key string, v json.RawMessage) {
		if ok = ok && !bytes.ContainsAny(v, "<>&\u2028\u2029"); ok {
			b = append(b, key...)
			buf := bytes.NewBuffer(b)
			ok = json.Compact(buf, v) == nil
			b = buf.Bytes()
		}
	}
	b = strconv.AppendInt(append(b, `{"attempt":`...), int64(d.Attempt), 10)
	if d.Delivery != "" {
		str(`,"delivery":`, d.Delivery)
	}
	if d.FairKey != "" {
		str(`,"fair_key":`, d.FairKey)
	}
	raw(`,"inputs":`, d.Inputs)
	str(`,"job_id":`, d.JobID)
	b = strconv.AppendInt(append(b, `,"max_attempts":`...), int64(d.MaxAttempts), 10)
	str(`,"namespace":`, d.Namespace)
	raw(`,"payload":`, d.Payload)
	raw(`,"plan":`, d.Plan)
	b = strconv.AppendInt(append(b, `,"priority":`...), int64(d.Priority), 10)
	str(`,"queue":`, d.Queue)
	if d.Requires == nil {
		b = append(b, `,"requires":null`...)
	} else {
		b = append(b, `,"requires":[`...)
		for i, r := range d.Requires {
			if i > 0 {
				b = append(b, ',')
			}
			str("", r)
		}
		b = append(b, ']')
	}
	b = strconv.AppendInt(append(b, `,"timeout_seconds":`...), int64(d.TimeoutSeconds), 10)
	if d.TraceParent != "" {
		str(`,"traceparent":`, d.TraceParent)
	}
	if d.TraceState != "" {
		str(`,"tracestate":`, d.TraceState)
	}
	str(`,"type":`, d.Type)
	return append(b, '}'), ok
}

// plainString reports whether json.Marshal writes s as it is, between
// quotes.
func plainString(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		case c >= utf8.RuneSelf:
			return false
		}
	}
	return true
}

// deliveryFor is the delivery record of j.
func deliveryFor(j records.Job) delivery {
	d := delivery{
		Attempt: j.Attempt, Inputs: rawOrNull(j.Inputs), JobID: j.ID, MaxAttempts: j.MaxAttempts, Namespace: j.Namespace,
		Payload: rawOrNull(j.Payload), Plan: rawOrNull(j.Plan), Priority: j.Priority, Queue: j.Queue,
		Requires: j.Requires, TimeoutSeconds: j.TimeoutSeconds, Type: j.Type,
		Parents: j.Parents, ParentsTruncated: j.ParentsTruncated, FairKey: j.FairKey,
	}
	if j.Status == records.StatusRunning && j.Delivery != nil {
		d.Delivery = *j.Delivery
		d.TraceParent, d.TraceState = j.TraceParent, j.TraceState
	}
	return d
}
