// Package logging builds the logger agq and agw write, one way: JSON lines,
// or lines for people ("console", the default on a terminal), at a level
// zerolog names. It imports nothing of agq, so that agw, which imports none
// of the server's packages, shares it with the server.
package logging

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
)

// New is a logger writing to out at level (debug, info, warn or error, in
// any case) in format: "json", "console", or "" for console when out is a
// terminal and JSON otherwise. Console lines are coloured on a terminal
// only.
func New(out io.Writer, level, format string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(strings.ToLower(level))
	if err != nil || lvl == zerolog.NoLevel {
		return zerolog.Logger{}, fmt.Errorf("log-level %q: must be debug, info, warn or error", level)
	}
	f, isFile := out.(*os.File)
	terminal := isFile && isatty.IsTerminal(f.Fd())
	if format == "" && terminal {
		format = "console"
	}
	if format == "console" {
		out = zerolog.ConsoleWriter{Out: out, TimeFormat: time.TimeOnly, NoColor: !terminal}
	}
	return zerolog.New(out).Level(lvl).With().Timestamp().Logger(), nil
}
