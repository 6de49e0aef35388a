package worker

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// registerReply is WORKER.REGISTER's answer:
// "+OK worker_id=<id> heartbeat_interval=<seconds>".
type registerReply struct {
	WorkerID          string
	HeartbeatInterval time.Duration // zero when the server named none
}

func parseRegisterReply(s string) (registerReply, error) {
	var r registerReply
	tokens, err := okTokens(s)
	if err != nil {
		return r, err
	}
	for _, tok := range tokens {
		key, value, _ := strings.Cut(tok, "=")
		switch key {
		case "worker_id":
			r.WorkerID = value
		case "heartbeat_interval":
			if r.HeartbeatInterval, err = parseInterval(value); err != nil {
				return r, fmt.Errorf("heartbeat_interval %q: %w", value, err)
			}
		}
	}
	return r, nil
}

// parseInterval reads seconds ("30", "0.5"), or a Go duration ("30s") should
// a server say it that way.
func parseInterval(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		secs, ferr := strconv.ParseFloat(v, 64)
		if ferr != nil {
			return 0, fmt.Errorf("not a number of seconds")
		}
		d = time.Duration(secs * float64(time.Second))
	}
	if d <= 0 || d > 24*time.Hour {
		return 0, fmt.Errorf("out of range")
	}
	return d, nil
}

// heartbeatReply is WORKER.HEARTBEAT's answer: "+OK", optionally followed by
// space-separated tokens "drain=true" and "cancel=<job_id>,<job_id>".
// Tokens agw does not know are kept in Unknown and otherwise ignored, so
// that a newer server can say more.
type heartbeatReply struct {
	Drain   bool
	Cancel  []string
	Unknown []string
}

func parseHeartbeatReply(s string) (heartbeatReply, error) {
	var r heartbeatReply
	tokens, err := okTokens(s)
	if err != nil {
		return r, err
	}
	for _, tok := range tokens {
		key, value, _ := strings.Cut(tok, "=")
		switch key {
		case "drain":
			r.Drain = value == "true" || value == "1"
		case "cancel":
			for _, id := range strings.Split(value, ",") {
				if id != "" {
					r.Cancel = append(r.Cancel, id)
				}
			}
		default:
			r.Unknown = append(r.Unknown, tok)
		}
	}
	return r, nil
}

// okTokens splits a status reply that must begin with OK.
func okTokens(s string) ([]string, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 || fields[0] != "OK" {
		return nil, fmt.Errorf("unexpected reply %q", s)
	}
	return fields[1:], nil
}
