package worker

import (
	"context"
	"log/slog"

	"github.com/rs/zerolog"
)

// zerologHandler writes the client package's slog records to agw's
// zerolog logger, so that agw keeps one log format.
type zerologHandler struct {
	log zerolog.Logger
}

func zerologLevel(l slog.Level) zerolog.Level {
	switch {
	case l >= slog.LevelError:
		return zerolog.ErrorLevel
	case l >= slog.LevelWarn:
		return zerolog.WarnLevel
	case l >= slog.LevelInfo:
		return zerolog.InfoLevel
	default:
		return zerolog.DebugLevel
	}
}

func (h zerologHandler) Enabled(_ context.Context, l slog.Level) bool {
	return zerologLevel(l) >= h.log.GetLevel()
}

func (h zerologHandler) Handle(_ context.Context, r slog.Record) error {
	ev := h.log.WithLevel(zerologLevel(r.Level))
	r.Attrs(func(a slog.Attr) bool {
		ev = withAttr(ev, a)
		return true
	})
	ev.Msg(r.Message)
	return nil
}

func (h zerologHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := h.log.With()
	for _, a := range attrs {
		c = c.Interface(a.Key, a.Value.Resolve().Any())
	}
	return zerologHandler{log: c.Logger()}
}

// WithGroup is not used by the client package: attributes stay flat.
func (h zerologHandler) WithGroup(string) slog.Handler { return h }

func withAttr(ev *zerolog.Event, a slog.Attr) *zerolog.Event {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return ev.Str(a.Key, v.String())
	case slog.KindInt64:
		return ev.Int64(a.Key, v.Int64())
	case slog.KindDuration:
		return ev.Dur(a.Key, v.Duration())
	case slog.KindTime:
		return ev.Time(a.Key, v.Time())
	}
	if err, ok := v.Any().(error); ok {
		return ev.AnErr(a.Key, err)
	}
	return ev.Interface(a.Key, v.Any())
}
