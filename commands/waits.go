package commands

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/agq/agq/records"
	"github.com/agq/agq/resp"
)

func (s *Server) waitCommands() []*Command {
	return []*Command{
		{Name: "job.signal", Arity: -4, Roles: producers | roleWorker, Handler: s.cmdJobSignal},
		{Name: "step.wait", Arity: -5, Roles: workers, Handler: s.cmdStepWait},
	}
}

// maxSignalID bounds a signal's ID, in bytes.
const maxSignalID = 128

// JOB.SIGNAL job_id name json [ID token]
func (s *Server) cmdJobSignal(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	p := records.SignalParams{JobID: string(args[1]), Name: string(args[2])}
	switch {
	case len(args) == 6 && resp.Is(args[4], "id"):
		if n := len(args[5]); n < 1 || n > maxSignalID {
			return nil, resp.Errorf("ID must be 1 to %d bytes", maxSignalID)
		}
		if err := textError(args[5]); err != nil {
			return nil, resp.Errorf("invalid ID: %s", err)
		}
		p.Token = string(args[5])
	case len(args) != 4:
		return nil, resp.ErrSyntax
	}
	if int64(len(args[3])) > s.opts.MaxPayload {
		return nil, resp.ErrPayloadTooBig
	}
	if !json.Valid(args[3]) {
		return nil, resp.Errorf("invalid signal: must be JSON")
	}
	p.Payload = args[3]
	return okOr(sess.eng.JobSignal(ctx, p))
}

// STEP.WAIT job_id step_id SIGNAL name [TIMEOUT seconds] [DELIVERY token]
// STEP.WAIT job_id step_id JOBS id [id …] [TIMEOUT seconds] [DELIVERY token]
func (s *Server) cmdStepWait(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	p, rest, err := s.readStepCall(ctx, sess, args, len(args))
	if err != nil {
		return nil, err
	}
	w := records.StepWaitParams{StepParams: p}
	if n := len(rest); n >= 2 && resp.Is(rest[n-2], "timeout") {
		secs, err := strconv.ParseFloat(string(rest[n-1]), 64)
		if err != nil || !(secs >= 1 && secs <= maxStepWait.Seconds()) {
			return nil, resp.Errorf("TIMEOUT must be between 1 and 2592000 seconds (30 days)")
		}
		w.Timeout = time.Duration(secs * float64(time.Second))
		rest = rest[:n-2]
	}
	if len(rest) < 2 {
		return nil, resp.ErrSyntax
	}
	switch resp.Upper(rest[0]) {
	case "SIGNAL":
		if len(rest) != 2 {
			return nil, resp.ErrSyntax
		}
		w.Signal = string(rest[1])
	case "JOBS":
		if len(rest)-1 > records.MaxAwaited {
			return nil, resp.Errorf("JOBS names at most %d jobs", records.MaxAwaited)
		}
		for _, id := range rest[1:] {
			if string(id) == p.JobID {
				return nil, resp.Errorf("job %s cannot wait for itself", p.JobID)
			}
			w.Jobs = append(w.Jobs, string(id))
		}
	default:
		return nil, resp.ErrSyntax
	}
	r, err := sess.eng.StepWait(ctx, w)
	if err != nil {
		return nil, err
	}
	if !r.Awaiting {
		// As STEP.BEGIN's: compact, not as PostgreSQL prints jsonb.
		var out bytes.Buffer
		if err := json.Compact(&out, r.Output); err != nil {
			return nil, err
		}
		return resp.Bulk(out.Bytes()), nil
	}
	return resp.SimpleString("AWAITING " + deadlineText(r.Deadline)), nil
}

// deadlineText is a wait's deadline as STEP.WAIT answers it.
func deadlineText(t *time.Time) string {
	if t == nil {
		return "never"
	}
	return t.UTC().Format(time.RFC3339Nano)
}
