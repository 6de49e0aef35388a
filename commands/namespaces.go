package commands

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/agq/agq/internal/auth"
	"github.com/agq/agq/internal/names"
	"github.com/agq/agq/records"
	"github.com/agq/agq/resp"
)

func (s *Server) namespaceCommands() []*Command {
	return []*Command{
		{Name: "namespace", Arity: -1, Roles: anyRole, Handler: s.cmdNamespace},
		{Name: "namespace.create", Arity: 2, Roles: roleAdmin, Handler: s.cmdNamespaceCreate},
		{Name: "namespace.list", Arity: 1, Roles: roleAdmin | roleViewer, Handler: s.cmdNamespaceList},
		{Name: "namespace.delete", Arity: 2, Roles: roleAdmin, Handler: s.cmdNamespaceDelete},
		{Name: "namespace.config", Arity: -2, Roles: roleAdmin, Handler: s.cmdNamespaceConfig},
	}
}

// The most retention NAMESPACE.CONFIG takes: ten years.
const maxRetention = 10 * 365 * 24 * time.Hour

// clusterKey reports whether p spans every namespace (an admin or a viewer
// key bound to none).
func clusterKey(p auth.Principal) bool { return p.Namespace == "" }

// belongsElsewhere is the refusal of a key of namespace ns acting on
// another.
func belongsElsewhere(ns string) error {
	return resp.CodeErrorf("NOPERM", "this key belongs to namespace %s", ns)
}

// onlyClusterAdmins refuses a namespace's own admin what only an admin of
// every namespace may do.
func onlyClusterAdmins(p auth.Principal) error {
	if !clusterKey(p) {
		return belongsElsewhere(p.Namespace)
	}
	return nil
}

func noSuchNamespace(name string) error {
	return resp.Errorf("no such namespace %s", name)
}

// NAMESPACE [name]
//
// Alone, the connection's namespace. With a name, a cluster key's
// connection moves there; any other key may only name its own.
func (s *Server) cmdNamespace(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	if len(args) == 1 {
		return resp.BulkString(sess.eng.Namespace()), nil
	}
	if len(args) > 2 {
		return nil, resp.ErrSyntax
	}
	name, p := string(args[1]), sess.principal()
	if !clusterKey(p) {
		if name != p.Namespace {
			return nil, belongsElsewhere(p.Namespace)
		}
		return resp.OK, nil
	}
	if ok, err := sess.eng.NamespaceExists(ctx, name); err != nil || !ok {
		return nil, cmp.Or(err, noSuchNamespace(name))
	}
	sess.eng = s.eng.In(name)
	return resp.OK, nil
}

// NAMESPACE.CREATE name
func (s *Server) cmdNamespaceCreate(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	if err := onlyClusterAdmins(sess.principal()); err != nil {
		return nil, err
	}
	name := string(args[1])
	if !names.Queue(name) {
		return nil, resp.Errorf("invalid namespace name '%s': a namespace is named as a queue, %s", name, names.Rule)
	}
	err := sess.eng.NamespaceCreate(ctx, name)
	if errors.Is(err, records.ErrNamespaceDeleting) {
		return nil, resp.Errorf("namespace %s is being deleted; create it again once it is gone", name)
	}
	if err != nil {
		return nil, err
	}
	s.log.Info().Int64("conn", sess.ID).Str("by", sess.principal().Name).Str("namespace", name).Msg("namespace created")
	return resp.OK, nil
}

// NAMESPACE.LIST
//
// Every namespace for a cluster key; a namespace's own keys see theirs.
func (s *Server) cmdNamespaceList(ctx context.Context, sess *Session, _ [][]byte) (resp.Reply, error) {
	if p := sess.principal(); !clusterKey(p) {
		return resp.StringArray([]string{p.Namespace}), nil
	}
	all, err := sess.eng.Namespaces(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(all))
	for i, n := range all {
		out[i] = n.Name
	}
	return resp.StringArray(out), nil
}

// NAMESPACE.DELETE name
func (s *Server) cmdNamespaceDelete(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	if err := onlyClusterAdmins(sess.principal()); err != nil {
		return nil, err
	}
	name := string(args[1])
	err := sess.eng.NamespaceDelete(ctx, name)
	var unfinished *records.UnfinishedError
	switch {
	case errors.As(err, &unfinished):
		return nil, resp.Errorf("namespace %s has %d unfinished jobs", name, unfinished.N)
	case errors.Is(err, records.ErrDefaultNamespace):
		return nil, resp.Errorf("%s", err)
	case errors.Is(err, records.ErrNotFound):
		return nil, noSuchNamespace(name)
	case err != nil:
		return nil, err
	}
	// Its keys stop working here at once (other nodes hear it).
	for _, other := range s.sessionList() {
		if other.principal().Namespace == name {
			other.revoke()
		}
	}
	s.log.Info().Int64("conn", sess.ID).Str("by", sess.principal().Name).Str("namespace", name).Msg("namespace deleted; its rows go in batches")
	return resp.OK, nil
}

// NAMESPACE.CONFIG name [MAXUNFINISHED n|NONE] [SUBMITRATE n PER seconds|NONE]
// [MAXRUNNING n|NONE] [RETAINCOMPLETED seconds|NONE] [RETAINFAILED seconds|NONE]
//
// Reads or sets a namespace's quotas and retention; a namespace's own
// admin reads its own.
func (s *Server) cmdNamespaceConfig(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	name, p := string(args[1]), sess.principal()
	change, err := parseNamespaceChange(args[2:])
	if err != nil {
		return nil, err
	}
	if !clusterKey(p) && (change != nil || name != p.Namespace) {
		return nil, belongsElsewhere(p.Namespace)
	}
	n, counts, err := sess.eng.NamespaceConfig(ctx, name, change)
	if errors.Is(err, records.ErrNotFound) {
		return nil, noSuchNamespace(name)
	}
	if err != nil {
		return nil, err
	}
	orNil := func(v int64) resp.Reply {
		if v == 0 {
			return resp.Nil
		}
		return resp.Int(v)
	}
	return resp.Map{
		{Key: "name", Value: resp.BulkString(n.Name)},
		{Key: "max_unfinished", Value: orNil(n.MaxUnfinished)},
		{Key: "submit_rate", Value: orNil(int64(n.SubmitRate))},
		{Key: "submit_period", Value: orNil(int64(n.SubmitPeriod / time.Second))},
		{Key: "max_running", Value: orNil(int64(n.MaxRunning))},
		{Key: "retain_completed", Value: orNil(int64(n.RetainCompleted / time.Second))},
		{Key: "retain_failed", Value: orNil(int64(n.RetainFailed / time.Second))},
		{Key: "unfinished", Value: resp.Int(counts.Unfinished)},
		{Key: "running", Value: resp.Int(counts.Running)},
		{Key: "submitted_last_minute", Value: resp.Int(counts.SubmittedLastMinute)},
	}, nil
}

// parseNamespaceChange reads NAMESPACE.CONFIG's settings, each at most
// once; nil when there are none.
func parseNamespaceChange(args [][]byte) (*records.NamespaceChange, error) {
	if len(args) == 0 {
		return nil, nil
	}
	c := &records.NamespaceChange{}
	seen := map[string]bool{}
	for i := 0; i < len(args); {
		opt := resp.Upper(args[i])
		if seen[opt] || i+1 >= len(args) {
			return nil, resp.ErrSyntax
		}
		seen[opt] = true
		switch opt {
		case "MAXUNFINISHED", "MAXRUNNING":
			n, err := limitValue(args[i+1], 1_000_000_000, opt, true)
			if err != nil {
				return nil, err
			}
			if opt == "MAXRUNNING" {
				c.MaxRunning = &n
			} else {
				m := int64(n)
				c.MaxUnfinished = &m
			}
			i += 2
		case "SUBMITRATE":
			if resp.Is(args[i+1], "NONE") {
				c.SubmitRate = &records.Rate{}
				i += 2
				continue
			}
			if i+3 >= len(args) || !resp.Is(args[i+2], "PER") {
				return nil, resp.ErrSyntax
			}
			n, err := limitValue(args[i+1], 1_000_000_000, "SUBMITRATE", false)
			if err != nil {
				return nil, err
			}
			secs, err := limitValue(args[i+3], 86_400, "SUBMITRATE period", false)
			if err != nil {
				return nil, err
			}
			c.SubmitRate = &records.Rate{Limit: n, Period: time.Duration(secs) * time.Second}
			i += 4
		case "RETAINCOMPLETED", "RETAINFAILED":
			d, err := retention(args[i+1], opt)
			if err != nil {
				return nil, err
			}
			if opt == "RETAINCOMPLETED" {
				c.RetainCompleted = &d
			} else {
				c.RetainFailed = &d
			}
			i += 2
		default:
			return nil, resp.ErrSyntax
		}
	}
	return c, nil
}

// retention parses seconds from 60 to ten years, or NONE (0: the
// server's).
func retention(arg []byte, what string) (time.Duration, error) {
	if resp.Is(arg, "NONE") {
		return 0, nil
	}
	n, err := resp.ParseInt(arg)
	if err != nil || n < 60 || n > int64(maxRetention/time.Second) {
		return 0, resp.Errorf("%s must be NONE or a whole number of seconds from 60 to %d (ten years)", what, int64(maxRetention/time.Second))
	}
	return time.Duration(n) * time.Second, nil
}

// keyNamespace is the namespace KEY.CREATE mints in: the one named
// (a cluster admin's choice) or the caller's own.
func (s *Server) keyNamespace(ctx context.Context, sess *Session, args [][]byte) (string, error) {
	p := sess.principal()
	var named string
	switch {
	case len(args) == 0:
	case len(args) == 2 && resp.Is(args[0], "NAMESPACE"):
		named = string(args[1])
	default:
		return "", resp.ErrSyntax
	}
	if !clusterKey(p) {
		if named != "" && named != p.Namespace {
			return "", belongsElsewhere(p.Namespace)
		}
		return p.Namespace, nil
	}
	if named == "" {
		return "", nil
	}
	if ok, err := sess.eng.NamespaceExists(ctx, named); err != nil || !ok {
		return "", cmp.Or(err, noSuchNamespace(named))
	}
	return named, nil
}

// foreignPrincipal is KEY.CREATE's refusal of another namespace's
// principal.
func foreignPrincipal(name string, err *records.ForeignPrincipalError) error {
	if err.Namespace == "" {
		return resp.Errorf("principal %s is a key of every namespace", name)
	}
	return resp.Errorf("principal %s belongs to namespace %s", name, err.Namespace)
}
