package store

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/agq/agq/records"
)

// PrincipalPut creates the principal or replaces its key and role (a key
// rotation); the old key stops working in the same statement, and every
// node is told to drop sessions holding it. A principal of another
// namespace (a cluster key being one of no namespace) is not replaced:
// *records.ForeignPrincipalError says whose it is.
func (s *Store) PrincipalPut(ctx context.Context, p records.Key) error {
	var put bool
	var holder *string
	err := s.Pool.QueryRow(ctx, `
		WITH put AS (
			INSERT INTO principals AS p (name, role, key_digest, source, namespace)
			VALUES ($1, $2, $3, $4, nullif($6, ''))
			ON CONFLICT (name) DO UPDATE
			SET role = excluded.role, key_digest = excluded.key_digest, source = excluded.source,
			    created_at = now(), revoked_at = NULL
			WHERE p.namespace IS NOT DISTINCT FROM excluded.namespace
			RETURNING name
		), told AS (
			SELECT pg_notify($5, name || ' ' || encode($3, 'hex')) FROM put
		)
		SELECT EXISTS (SELECT 1 FROM put), (SELECT namespace FROM principals WHERE name = $1)`,
		p.Name, p.Role, p.KeyDigest, p.Source, ChannelKeys, p.Namespace).Scan(&put, &holder)
	if err != nil {
		return interpretError(err)
	}
	if !put {
		return &records.ForeignPrincipalError{Namespace: deref(holder)}
	}
	return nil
}

// PrincipalPutIfAbsent creates the principal only when no principal of that
// name exists — or, with replaceRevoked, none that is live; it reports
// whether it did.
func (s *Store) PrincipalPutIfAbsent(ctx context.Context, p records.Key, replaceRevoked bool) (bool, error) {
	tag, err := s.Pool.Exec(ctx, `
		INSERT INTO principals (name, role, key_digest, source, namespace)
		VALUES ($1, $2, $3, $4, nullif($6, ''))
		ON CONFLICT (name) DO UPDATE
		SET role = excluded.role, key_digest = excluded.key_digest, source = excluded.source,
		    created_at = now(), revoked_at = NULL, namespace = excluded.namespace
		WHERE $5 AND principals.revoked_at IS NOT NULL`,
		p.Name, p.Role, p.KeyDigest, p.Source, replaceRevoked, p.Namespace)
	if err != nil {
		return false, interpretError(err)
	}
	return tag.RowsAffected() == 1, nil
}

// PrincipalByDigest finds the live principal holding a key digest; the
// partial unique index principals_live_digest serves it.
func (s *Store) PrincipalByDigest(ctx context.Context, digest []byte) (records.Key, error) {
	var p records.Key
	err := s.Pool.QueryRow(ctx, `
		SELECT name, role, key_digest, source, created_at, coalesce(namespace, '') FROM principals
		WHERE key_digest = $1 AND revoked_at IS NULL`, digest).
		Scan(&p.Name, &p.Role, &p.KeyDigest, &p.Source, &p.CreatedAt, &p.Namespace)
	return p, interpretError(err)
}

// ErrLastAdmin refuses to revoke the last admin key stored: nobody could
// administer agq any more.
var ErrLastAdmin = errors.New("cannot revoke the last admin key")

// PrincipalRevoke revokes a principal's key. Revoking twice is not an error;
// ErrNotFound means no such principal ever existed. The last live admin in
// the table is kept unless keepsAnotherAdmin says the configuration holds one.
func (s *Store) PrincipalRevoke(ctx context.Context, name string, keepsAnotherAdmin bool) error {
	return interpretError(pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		// Serialise revocations, so two admins revoking each other cannot
		// both pass the last-admin check.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('agq principals'))`); err != nil {
			return err
		}
		var role string
		var live, cluster bool
		err := tx.QueryRow(ctx, `SELECT role, revoked_at IS NULL, namespace IS NULL FROM principals WHERE name = $1`, name).Scan(&role, &live, &cluster)
		if errors.Is(err, pgx.ErrNoRows) {
			return records.ErrNotFound
		}
		if err != nil {
			return err
		}
		if live && role == "admin" && cluster && !keepsAnotherAdmin {
			var others int
			if err := tx.QueryRow(ctx, `
				SELECT count(*) FROM principals
				WHERE role = 'admin' AND revoked_at IS NULL AND namespace IS NULL AND name <> $1`, name).Scan(&others); err != nil {
				return err
			}
			if others == 0 {
				return ErrLastAdmin
			}
		}
		_, err = tx.Exec(ctx, `
			UPDATE principals SET revoked_at = coalesce(revoked_at, now()) WHERE name = $1`, name)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, $2)`, ChannelKeys, name)
		return err
	}))
}

// PrincipalList lists live principals by name.
func (s *Store) PrincipalList(ctx context.Context) ([]records.Key, error) {
	rows, err := s.Pool.Query(ctx, `
		SELECT name, role, source, created_at, coalesce(namespace, '') FROM principals
		WHERE revoked_at IS NULL ORDER BY name`)
	return collect(rows, err, func(row pgx.CollectableRow) (p records.Key, err error) {
		return p, row.Scan(&p.Name, &p.Role, &p.Source, &p.CreatedAt, &p.Namespace)
	})
}

// AdminExists reports whether any live cluster admin principal is stored.
func (s *Store) AdminExists(ctx context.Context) (bool, error) {
	var ok bool
	err := s.Pool.QueryRow(ctx, `
		SELECT EXISTS (SELECT 1 FROM principals WHERE role = 'admin' AND revoked_at IS NULL AND namespace IS NULL)`).Scan(&ok)
	return ok, interpretError(err)
}

// PrincipalExists reports whether a principal of that name was ever
// created, revoked or not: a worker id named like one is its key's.
func (s *Store) PrincipalExists(ctx context.Context, name string) (bool, error) {
	var ok bool
	err := s.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM principals WHERE name = $1)`, name).Scan(&ok)
	return ok, interpretError(err)
}

// PrincipalNamespace is the namespace of a stored principal ("" for a
// cluster key); ErrNotFound when none of that name was ever created.
func (s *Store) PrincipalNamespace(ctx context.Context, name string) (string, error) {
	var ns *string
	err := s.Pool.QueryRow(ctx, `SELECT namespace FROM principals WHERE name = $1`, name).Scan(&ns)
	return deref(ns), interpretError(err)
}
