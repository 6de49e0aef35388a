package commands

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/agq/agq/internal/auth"
	"github.com/agq/agq/records"
	"github.com/agq/agq/resp"
)

// maxLogLine bounds one published log line.
const maxLogLine = 64 << 10

// PUBLISH job.<id>.logs line — by the worker holding the job. The line is
// kept with the job's attempt (JOB.LOGS) and sent to the channel's
// subscribers on every node. Answers how many subscribers of this node got
// it, as Redis counts its own.
func (s *Server) cmdPublish(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	channel, line := string(args[1]), args[2]
	id, ok := strings.CutPrefix(channel, "job.")
	if ok {
		id, ok = strings.CutSuffix(id, ".logs")
	}
	if !ok || id == "" {
		return nil, resp.CodeErrorf("NOPERM", "only a job's holder publishes, and only to job.<id>.logs")
	}
	if sess.principal().Role != auth.RoleWorker {
		return nil, resp.CodeErrorf("NOPERM", "only the worker holding job %s publishes its logs", id)
	}
	if len(line) > maxLogLine {
		return nil, resp.Errorf("log line too long: at most %d bytes", maxLogLine)
	}
	if !utf8.Valid(line) || bytes.IndexByte(line, 0) >= 0 {
		return nil, resp.Errorf("invalid log line: must be UTF-8 text without NUL bytes")
	}
	w, err := s.hotWorker(ctx, sess)
	if err != nil {
		return nil, err
	}
	n := s.broker.Receivers(sess.eng.Namespace(), channel)
	if err := sess.eng.AppendLog(ctx, id, w.ID, channel, line); err != nil {
		return nil, err
	}
	return resp.Int(n), nil
}

// JOB.LOGS job_id [attempt] — the kept log lines of an attempt (the
// current or last one by default), oldest first.
func (s *Server) cmdJobLogs(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	id := string(args[1])
	attempt := 0
	if len(args) == 3 {
		n, err := strconv.Atoi(string(args[2]))
		if err != nil || n < 1 {
			return nil, resp.Errorf("attempt must be a positive integer")
		}
		attempt = n
	}
	lines, _, err := sess.eng.JobLogs(ctx, id, attempt)
	if err != nil {
		return nil, &records.JobError{JobID: id, Err: err}
	}
	return resp.StringArray(lines), nil
}
