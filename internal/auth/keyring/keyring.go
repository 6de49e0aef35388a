// Package keyring keeps session keys: static ones from the configuration,
// minted ones in the database. It implements auth.Keys for the wire layer
// and the dashboard, which know no store.
package keyring

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/agq/agq/internal/auth"
	"github.com/agq/agq/internal/names"
	"github.com/agq/agq/records"
	"github.com/agq/agq/store"
)

var _ auth.Keys = (*Keyring)(nil)

type staticKey struct {
	digest [32]byte
	auth.Principal
}

// Keyring authenticates keys against static configuration and the store.
type Keyring struct {
	store  *store.Store
	static []staticKey
}

// New validates the static keys and returns a keyring.
func New(st *store.Store, static auth.StaticKeys, source map[string]string) (*Keyring, error) {
	k := &Keyring{store: st}
	for role, entries := range static {
		if !auth.ValidRole(role) {
			return nil, fmt.Errorf("%w: %q", auth.ErrBadRole, role)
		}
		for name, spec := range entries {
			if !names.Principal(name) {
				return nil, fmt.Errorf("principal %q: %w", name, auth.ErrBadPrincipal)
			}
			digest, err := auth.ParseKeySpec(spec)
			if err != nil {
				return nil, fmt.Errorf("key of %q: %w", name, err)
			}
			src := source[role]
			if src == "" {
				src = "config"
			}
			// The file's admins and viewers span every namespace; its
			// other keys act in the default one.
			ns := records.DefaultNamespace
			if role == auth.RoleAdmin || role == auth.RoleViewer {
				ns = ""
			}
			k.static = append(k.static, staticKey{digest: digest, Principal: auth.Principal{Name: name, Role: role, Source: src, Namespace: ns}})
		}
	}
	// Map order is random; KEY.LIST shows them in a stable order.
	slices.SortFunc(k.static, func(a, b staticKey) int { return strings.Compare(a.Name, b.Name) })
	return k, nil
}

// HasStaticAdmin reports whether configuration supplies an admin key.
func (k *Keyring) HasStaticAdmin() bool {
	for _, s := range k.static {
		if s.Role == auth.RoleAdmin {
			return true
		}
	}
	return false
}

// Authenticate checks key, and user when it is given. user may be empty or
// "default" (any principal), the principal's name, or — for worker keys — the
// worker id the connection will act as, which must look like one. Whose the
// id is, WORKER.REGISTER says (NOPERM for another principal's).
func (k *Keyring) Authenticate(ctx context.Context, user, key string) (auth.Principal, error) {
	digest := auth.Digest(key)
	p, err := k.lookup(ctx, digest)
	if err != nil {
		return auth.Principal{}, err
	}
	if user == "" || user == "default" || user == p.Name {
		return p, nil
	}
	if p.Role != auth.RoleWorker || !names.Worker(user) {
		return auth.Principal{}, auth.ErrBadCredentials
	}
	return p, nil
}

func (k *Keyring) lookup(ctx context.Context, digest [32]byte) (auth.Principal, error) {
	for _, s := range k.static {
		if subtle.ConstantTimeCompare(s.digest[:], digest[:]) == 1 {
			p := s.Principal
			p.Digest = digest
			return p, nil
		}
	}
	row, err := k.store.PrincipalByDigest(ctx, digest[:])
	if errors.Is(err, records.ErrNotFound) {
		return auth.Principal{}, auth.ErrBadCredentials
	}
	if err != nil {
		return auth.Principal{}, fmt.Errorf("looking up key: %w", err)
	}
	// The row was found by its digest; compare again in constant time so the
	// decision never rests on a variable-time comparison.
	if subtle.ConstantTimeCompare(row.KeyDigest, digest[:]) != 1 {
		return auth.Principal{}, auth.ErrBadCredentials
	}
	return auth.Principal{Name: row.Name, Role: row.Role, Source: row.Source, Namespace: row.Namespace, Digest: digest}, nil
}

// Create mints a key for principal with role, replacing any key it had, and
// returns the key; it is not stored anywhere in clear.
func (k *Keyring) Create(ctx context.Context, role, name, namespace string) (string, error) {
	if !auth.ValidRole(role) {
		return "", auth.ErrBadRole
	}
	if !names.Principal(name) {
		return "", auth.ErrBadPrincipal
	}
	if k.isStatic(name) {
		return "", auth.ErrStaticPrincipal
	}
	key := auth.GenerateKey()
	d := auth.Digest(key)
	if namespace == "" && role != auth.RoleAdmin && role != auth.RoleViewer {
		namespace = records.DefaultNamespace
	}
	err := k.store.PrincipalPut(ctx, records.Key{Name: name, Role: role, KeyDigest: d[:], Source: "minted", Namespace: namespace})
	if err != nil {
		return "", fmt.Errorf("storing key: %w", err)
	}
	return key, nil
}

// Revoke revokes a minted key. Revoking an already revoked key succeeds.
func (k *Keyring) Revoke(ctx context.Context, name, within string) error {
	if s, ok := k.staticOf(name); ok {
		if within != "" && s.Namespace != within {
			return auth.ErrUnknownPrincipal
		}
		return auth.ErrStaticPrincipal
	}
	if within != "" {
		ns, err := k.store.PrincipalNamespace(ctx, name)
		if errors.Is(err, records.ErrNotFound) || (err == nil && ns != within) {
			return auth.ErrUnknownPrincipal
		}
		if err != nil {
			return err
		}
	}
	err := k.store.PrincipalRevoke(ctx, name, k.HasStaticAdmin())
	switch {
	case errors.Is(err, records.ErrNotFound):
		return auth.ErrUnknownPrincipal
	case errors.Is(err, store.ErrLastAdmin):
		return auth.ErrLastAdmin
	}
	return err
}

// List returns every live principal, static ones included.
func (k *Keyring) List(ctx context.Context, within string) ([]auth.Entry, error) {
	rows, err := k.store.PrincipalList(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]auth.Entry, 0, len(rows)+len(k.static))
	for _, s := range k.static {
		if within == "" || s.Namespace == within {
			out = append(out, auth.Entry{Principal: s.Principal})
		}
	}
	for _, r := range rows {
		if within == "" || r.Namespace == within {
			out = append(out, auth.Entry{Principal: auth.Principal{Name: r.Name, Role: r.Role, Source: r.Source, Namespace: r.Namespace}, CreatedAt: r.CreatedAt.UTC().Format("2006-01-02T15:04:05Z")})
		}
	}
	return out, nil
}

func (k *Keyring) isStatic(name string) bool {
	_, ok := k.staticOf(name)
	return ok
}

func (k *Keyring) staticOf(name string) (auth.Principal, bool) {
	for _, s := range k.static {
		if s.Name == name {
			return s.Principal, true
		}
	}
	return auth.Principal{}, false
}

// StillValid reports whether the key a principal authenticated with is
// still live: static keys always are; stored ones unless revoked or
// replaced since.
func (k *Keyring) StillValid(ctx context.Context, p auth.Principal) (bool, error) {
	for _, s := range k.static {
		if subtle.ConstantTimeCompare(s.digest[:], p.Digest[:]) == 1 {
			return true, nil
		}
	}
	row, err := k.store.PrincipalByDigest(ctx, p.Digest[:])
	if errors.Is(err, records.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return row.Name == p.Name, nil
}

// IsPrincipal reports whether name is a principal's, from configuration or
// minted (revoked or not).
func (k *Keyring) IsPrincipal(ctx context.Context, name string) (bool, error) {
	if k.isStatic(name) {
		return true, nil
	}
	ok, err := k.store.PrincipalExists(ctx, name)
	return ok, err
}
