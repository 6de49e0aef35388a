package commands

import (
	"context"
	"encoding/hex"
	"errors"

	"github.com/agq/agq/internal/auth"
	"github.com/agq/agq/records"
	"github.com/agq/agq/resp"
)

func (s *Server) keyCommands() []*Command {
	return []*Command{
		{Name: "key.create", Arity: -3, Roles: roleAdmin, Handler: s.cmdKeyCreate},
		{Name: "key.revoke", Arity: 2, Roles: roleAdmin, Handler: s.cmdKeyRevoke},
		{Name: "key.list", Arity: 1, Roles: roleAdmin, Handler: s.cmdKeyList},
	}
}

// KEY.CREATE role principal [NAMESPACE name]
func (s *Server) cmdKeyCreate(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	role, name := resp.Lower(args[1]), string(args[2])
	ns, err := s.keyNamespace(ctx, sess, args[3:])
	if err != nil {
		return nil, err
	}
	key, err := s.keys.Create(ctx, role, name, ns)
	var foreign *records.ForeignPrincipalError
	if errors.As(err, &foreign) {
		return nil, foreignPrincipal(name, foreign)
	}
	if err != nil {
		return nil, keyError(err)
	}
	// Sessions still holding the replaced key lose it, as with KEY.REVOKE.
	d := auth.Digest(key)
	s.RevokeSessions(name, hex.EncodeToString(d[:]))
	s.log.Info().Int64("conn", sess.ID).Str("by", sess.principal().Name).Str("principal", name).Str("role", role).Msg("key created")
	return resp.BulkString(key), nil
}

// KEY.REVOKE principal
func (s *Server) cmdKeyRevoke(ctx context.Context, sess *Session, args [][]byte) (resp.Reply, error) {
	name := string(args[1])
	if err := s.keys.Revoke(ctx, name, sess.principal().Namespace); err != nil {
		return nil, keyError(err)
	}
	s.RevokeSessions(name, "")
	s.log.Info().Int64("conn", sess.ID).Str("by", sess.principal().Name).Str("principal", name).Msg("key revoked")
	return resp.OK, nil
}

// KEY.LIST
func (s *Server) cmdKeyList(ctx context.Context, sess *Session, _ [][]byte) (resp.Reply, error) {
	entries, err := s.keys.List(ctx, sess.principal().Namespace)
	if err != nil {
		return nil, err
	}
	return resp.ArrayOf(entries, func(e auth.Entry) resp.Reply {
		ns := e.Namespace
		if ns == "" {
			ns = "*" // every namespace
		}
		return resp.StringArray([]string{e.Name, e.Role, e.Source, e.CreatedAt, ns})
	}), nil
}

func keyError(err error) error {
	for _, known := range []error{auth.ErrBadRole, auth.ErrBadPrincipal, auth.ErrStaticPrincipal, auth.ErrUnknownPrincipal, auth.ErrLastAdmin} {
		if errors.Is(err, known) {
			return resp.Errorf("%s", known.Error())
		}
	}
	return err
}
