package logging

import (
	"bytes"
	"strings"
	"testing"
)

func TestNewWritesJSONOffATerminalAtItsLevel(t *testing.T) {
	var out bytes.Buffer
	log, err := New(&out, "INFO", "")
	if err != nil {
		t.Fatal(err)
	}
	log.Debug().Msg("hidden")
	log.Info().Msg("shown")
	if got := out.String(); !strings.HasPrefix(got, `{"level":"info"`) || strings.Contains(got, "hidden") {
		t.Fatalf("%q: want JSON at info level when not on a terminal", got)
	}
}

func TestNewWritesConsoleLinesWithoutColourOffATerminal(t *testing.T) {
	var out bytes.Buffer
	log, err := New(&out, "warn", "console")
	if err != nil {
		t.Fatal(err)
	}
	log.Warn().Str("queue", "q").Msg("careful")
	if got := out.String(); !strings.Contains(got, "WRN careful queue=q") || strings.Contains(got, "\x1b[") {
		t.Fatalf("%q: want an uncoloured console line", got)
	}
}

func TestNewRefusesAnUnknownLevel(t *testing.T) {
	for _, level := range []string{"loud", ""} {
		if _, err := New(&bytes.Buffer{}, level, ""); err == nil {
			t.Errorf("level %q accepted", level)
		}
	}
}
