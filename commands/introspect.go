package commands

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/agq/agq/records"
	"github.com/agq/agq/resp"
)

// COMMAND [COUNT | LIST | INFO name… | DOCS [name…]]
//
// The replies have Redis's exact shapes: redis-cli asks for COMMAND DOCS
// when it starts interactively and crashes on a malformed answer.
func (s *Server) cmdCommand(_ context.Context, _ *Session, args [][]byte) (resp.Reply, error) {
	if len(args) == 1 {
		out := resp.Array{}
		for _, name := range s.commandNames() {
			out = append(out, commandInfo(s.table[name]))
		}
		return out, nil
	}
	switch resp.Lower(args[1]) {
	case "count":
		return resp.Int(len(s.table)), nil
	case "list":
		return resp.StringArray(s.commandNames()), nil
	case "info":
		out := resp.Array{}
		for _, a := range args[2:] {
			if c := s.table[resp.Lower(a)]; c != nil {
				out = append(out, commandInfo(c))
			} else {
				out = append(out, resp.NilArray)
			}
		}
		return out, nil
	case "docs":
		names := s.commandNames()
		if len(args) > 2 {
			names = names[:0]
			for _, a := range args[2:] {
				if n := resp.Lower(a); s.table[n] != nil {
					names = append(names, n)
				}
			}
		}
		out := resp.Map{}
		for _, n := range names {
			out = append(out, resp.KV{Key: n, Value: docsReply(s.table[n])})
		}
		return out, nil
	case "help":
		return helpReply(commandHelp), nil
	}
	return nil, resp.Errorf("unknown subcommand '%s'. Try COMMAND HELP.", args[1])
}

// commandHelp is COMMAND HELP's text.
var commandHelp = []string{
	"COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
	"(no subcommand)",
	"    Return details about all agq commands.",
	"COUNT",
	"    Return the total number of commands in this agq server.",
	"LIST",
	"    Return a list of all commands in this agq server.",
	"INFO [<command-name> ...]",
	"    Return details about multiple agq commands.",
	"    If no command names are given, documentation details for all",
	"    commands are returned.",
	"DOCS [<command-name> ...]",
	"    Return documentation details about multiple agq commands.",
	"    If no command names are given, documentation details for all",
	"    commands are returned.",
	"HELP",
	"    Print this help.",
}

func (s *Server) commandNames() []string {
	names := make([]string, 0, len(s.table))
	for n := range s.table {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// commandInfo is Redis 7's ten-element command description: name, arity,
// flags, first key, last key, key step, ACL categories, tips, key
// specifications, subcommands.
func commandInfo(c *Command) resp.Reply {
	flags := resp.Array{}
	if c.doc.write {
		flags = append(flags, resp.SimpleString("write"))
	} else {
		flags = append(flags, resp.SimpleString("readonly"))
	}
	if c.Roles == roleAdmin {
		flags = append(flags, resp.SimpleString("admin"))
	}
	if c.NoAuth {
		flags = append(flags, resp.SimpleString("no_auth"))
	}
	if c.Blocking {
		flags = append(flags, resp.SimpleString("blocking"))
	}
	return resp.Array{
		resp.BulkString(c.Name),
		resp.Int(c.Arity),
		flags,
		resp.Int(c.doc.keys.first), resp.Int(c.doc.keys.last), resp.Int(c.doc.keys.step),
		resp.Array{resp.SimpleString("@" + c.doc.group)}, resp.Array{}, resp.Array{}, resp.Array{},
	}
}

// infoSection is one "# Name" block of INFO. The sections about jobs,
// queues and workers are those of the session's namespace.
type infoSection struct {
	name   string
	fields func(ctx context.Context, sess *Session) ([][2]string, error)
}

func (s *Server) infoSections() []infoSection {
	return []infoSection{
		{"server", s.infoServer},
		{"clients", s.infoClients},
		{"stats", s.infoStats},
		{"leader", s.infoLeader},
		{"queues", s.infoQueues},
		{"workers", s.infoWorkers},
		{"jobs", s.infoJobs},
		// Redis tools expect the section; agq's keys live in no database.
		{"keyspace", func(context.Context, *Session) ([][2]string, error) { return nil, nil }},
	}
}

// INFO [section …]
func (s *Server) cmdInfo(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	want := map[string]bool{}
	for _, a := range args[1:] {
		want[resp.Lower(a)] = true
	}
	all := len(want) == 0 || want["all"] || want["everything"] || want["default"]
	var b strings.Builder
	for _, sec := range s.infoSections() {
		if !all && !want[sec.name] {
			continue
		}
		fields, err := sec.fields(ctx, sess)
		if err != nil {
			// One section's database trouble must not hide the others
			// from monitoring: it says so in its own place.
			fields = [][2]string{{"error", errorText(err)}}
		}
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		fmt.Fprintf(&b, "# %s\r\n", strings.ToUpper(sec.name[:1])+sec.name[1:])
		for _, f := range fields {
			fmt.Fprintf(&b, "%s:%s\r\n", f[0], f[1])
		}
	}
	return resp.BulkString(b.String()), nil
}

func (s *Server) infoServer(_ context.Context, sess *Session) ([][2]string, error) {
	port := ""
	s.mu.Lock()
	if len(s.lns) > 0 {
		addr := s.lns[0].Addr().String()
		port = addr[strings.LastIndexByte(addr, ':')+1:]
	}
	s.mu.Unlock()
	return [][2]string{
		{"redis_version", "7.0.0"},
		{"agq_version", Version},
		{"redis_mode", "standalone"},
		{"os", runtime.GOOS + " " + runtime.GOARCH},
		{"arch_bits", "64"},
		{"go_version", runtime.Version()},
		{"process_id", fmt.Sprint(os.Getpid())},
		{"node_id", s.opts.NodeID},
		{"namespace", sess.eng.Namespace()},
		{"tcp_port", port},
		{"uptime_in_seconds", fmt.Sprint(int(time.Since(s.started).Seconds()))},
	}, nil
}

func (s *Server) infoClients(context.Context, *Session) ([][2]string, error) {
	sessions := s.sessionList()
	blocked := 0
	for _, sess := range sessions {
		sess.mu.Lock()
		if sess.unblock != nil {
			blocked++
		}
		sess.mu.Unlock()
	}
	return [][2]string{
		{"connected_clients", fmt.Sprint(len(sessions))},
		{"blocked_clients", fmt.Sprint(blocked)},
		{"maxclients", fmt.Sprint(s.opts.MaxClients)},
	}, nil
}

func (s *Server) infoStats(context.Context, *Session) ([][2]string, error) {
	return [][2]string{
		{"total_connections_received", fmt.Sprint(s.nextID.Load())},
	}, nil
}

func (s *Server) infoLeader(ctx context.Context, _ *Session) ([][2]string, error) {
	isLeader := "0"
	if s.opts.IsLeader != nil && s.opts.IsLeader() {
		isLeader = "1"
	}
	node, since, err := s.eng.Leader(ctx)
	if errors.Is(err, records.ErrNotFound) {
		node = ""
	} else if err != nil {
		return nil, err
	}
	fields := [][2]string{{"is_leader", isLeader}, {"leader_node_id", node}}
	if node != "" {
		fields = append(fields, [2]string{"leader_since", since.UTC().Format(time.RFC3339)})
	}
	return fields, nil
}

func (s *Server) infoQueues(ctx context.Context, sess *Session) ([][2]string, error) {
	qs, err := sess.eng.QueueStats(ctx, "")
	if err != nil {
		return nil, err
	}
	fields := [][2]string{{"queues", fmt.Sprint(len(qs))}}
	for _, q := range qs {
		fields = append(fields, [2]string{"queue_" + q.Name, fmt.Sprintf("queued=%d,scheduled=%d,running=%d,retrying=%d,paused=%t",
			q.Counts[records.StatusQueued], q.Counts[records.StatusScheduled], q.Counts[records.StatusRunning], q.Counts[records.StatusRetrying], q.Paused)})
	}
	return fields, nil
}

func (s *Server) infoWorkers(ctx context.Context, sess *Session) ([][2]string, error) {
	counts, err := sess.eng.WorkerCounts(ctx)
	if err != nil {
		return nil, err
	}
	var fields [][2]string
	for _, st := range []string{records.WorkerActive, records.WorkerDraining, records.WorkerDead, records.WorkerUnregistered} {
		fields = append(fields, [2]string{"workers_" + strings.ToLower(st), fmt.Sprint(counts[st])})
	}
	return fields, nil
}

func (s *Server) infoJobs(ctx context.Context, sess *Session) ([][2]string, error) {
	counts, err := sess.eng.JobCounts(ctx)
	if err != nil {
		return nil, err
	}
	var fields [][2]string
	for _, st := range records.Statuses {
		fields = append(fields, [2]string{"jobs_" + st, fmt.Sprint(counts[st])})
	}
	return fields, nil
}

func errorText(err error) string {
	if errors.Is(err, records.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		return "database unavailable"
	}
	return "internal error"
}
