package pipeline

import (
	"unicode/utf8"
)

// headBuffer keeps the first max bytes written to it and drops the rest, so
// that the tool writing never blocks on a full pipe: past the cap its output
// is read and discarded, and the tool finishes normally.
type headBuffer struct {
	max       int
	buf       []byte
	truncated bool
}

func (b *headBuffer) Write(p []byte) (int, error) {
	if room := b.max - len(b.buf); len(p) > room {
		b.truncated = true
		b.buf = append(b.buf, p[:room]...)
	} else {
		b.buf = append(b.buf, p...)
	}
	return len(p), nil
}

// Bytes returns what was kept; when the output was cut, it ends on a whole
// UTF-8 character rather than half of one.
func (b *headBuffer) Bytes() []byte {
	if b.truncated {
		return trimPartialRuneEnd(b.buf)
	}
	return b.buf
}

// tailBuffer keeps the last max bytes written to it: a task's stderr, where
// the last lines say why it failed.
type tailBuffer struct {
	max int
	buf []byte
	cut bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= t.max {
		t.cut = t.cut || len(t.buf) > 0 || len(p) > t.max
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return n, nil
	}
	t.buf = append(t.buf, p...)
	if drop := len(t.buf) - t.max; drop > 0 {
		t.cut = true
		t.buf = t.buf[:copy(t.buf, t.buf[drop:])]
	}
	return n, nil
}

// String returns the tail; when older bytes were dropped, it starts on a
// whole UTF-8 character.
func (t *tailBuffer) String() string {
	if t.cut {
		return string(trimPartialRuneStart(t.buf))
	}
	return string(t.buf)
}

// trimPartialRuneEnd drops an incomplete UTF-8 sequence from the end of b.
func trimPartialRuneEnd(b []byte) []byte {
	for i := 1; i <= utf8.UTFMax && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			break
		}
	}
	return b
}

// trimPartialRuneStart drops the continuation bytes of a character cut in
// half from the start of b (at most three: a UTF-8 character has four bytes).
func trimPartialRuneStart(b []byte) []byte {
	i := 0
	for i < len(b) && i < utf8.UTFMax-1 && !utf8.RuneStart(b[i]) {
		i++
	}
	return b[i:]
}
