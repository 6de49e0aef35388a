package pipeline

import (
	"bytes"
	"strings"
)

// maxLine bounds a line handed to OnLine; a longer one is cut, with "…".
const maxLine = 1024

// lineTap hands each complete line written to it to fn, as it comes, and
// the last unterminated one at flush. It never fails the write: the
// output's own buffer is what the result is made of.
type lineTap struct {
	fn      func(string)
	partial []byte
	cut     bool // the current line was already handed over, cut
}

func (l *lineTap) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			l.add(p)
			break
		}
		l.add(p[:i])
		l.emit()
		p = p[i+1:]
	}
	return n, nil
}

func (l *lineTap) add(p []byte) {
	if l.cut {
		return
	}
	if room := maxLine - len(l.partial); len(p) > room {
		l.partial = append(l.partial, p[:room]...)
		l.fn(text(l.partial) + "…")
		l.partial, l.cut = l.partial[:0], true
		return
	}
	l.partial = append(l.partial, p...)
}

func (l *lineTap) emit() {
	if !l.cut {
		l.fn(text(l.partial))
	}
	l.partial, l.cut = l.partial[:0], false
}

// flush hands over an unterminated last line.
func (l *lineTap) flush() {
	if len(l.partial) > 0 {
		l.emit()
	}
}

// text is a line as agq can store it: UTF-8, no NUL, no carriage return.
func text(b []byte) string {
	s := strings.ToValidUTF8(string(bytes.TrimSuffix(b, []byte("\r"))), "\uFFFD")
	return strings.ReplaceAll(s, "\x00", "\uFFFD")
}
