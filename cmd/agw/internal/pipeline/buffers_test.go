package pipeline

import (
	"strings"
	"testing"
)

func TestHeadBuffer(t *testing.T) {
	t.Parallel()
	b := headBuffer{max: 5}
	b.Write([]byte("abc"))
	if string(b.Bytes()) != "abc" || b.truncated {
		t.Fatalf("%q %v", b.Bytes(), b.truncated)
	}
	n, err := b.Write([]byte("defgh"))
	if n != 5 || err != nil {
		t.Fatalf("Write = %d, %v; a capped buffer still consumes everything", n, err)
	}
	if string(b.Bytes()) != "abcde" || !b.truncated {
		t.Fatalf("%q %v", b.Bytes(), b.truncated)
	}

	t.Run("CutsOnACharacterBoundary", func(t *testing.T) {
		t.Parallel()
		b := headBuffer{max: 4}
		b.Write([]byte("ab€")) // € is three bytes: only one fits
		if got := string(b.Bytes()); got != "ab" {
			t.Fatalf("%q", got)
		}
	})

	t.Run("ExactFitIsNotTruncated", func(t *testing.T) {
		t.Parallel()
		b := headBuffer{max: 3}
		b.Write([]byte("abc"))
		b.Write(nil)
		if b.truncated {
			t.Fatal("truncated")
		}
	})
}

func TestTailBuffer(t *testing.T) {
	t.Parallel()
	b := tailBuffer{max: 8}
	b.Write([]byte("hello "))
	if b.String() != "hello " {
		t.Fatalf("%q", b.String())
	}
	b.Write([]byte("world"))
	if b.String() != "lo world" {
		t.Fatalf("%q", b.String())
	}
	b.Write([]byte(strings.Repeat("x", 20) + "the end!"))
	if b.String() != "the end!" {
		t.Fatalf("%q", b.String())
	}

	t.Run("StartsOnACharacterBoundary", func(t *testing.T) {
		t.Parallel()
		b := tailBuffer{max: 4}
		b.Write([]byte("a€bc")) // the last four bytes start inside €
		if got := b.String(); got != "bc" {
			t.Fatalf("%q", got)
		}
	})

	t.Run("ShortStderrIsWhole", func(t *testing.T) {
		t.Parallel()
		b := tailBuffer{max: 4}
		b.Write([]byte("€"))
		if got := b.String(); got != "€" {
			t.Fatalf("%q", got)
		}
	})
}
