// Package auth checks session keys. Keys are 32 random bytes shown once as
// hex; only their SHA-256 digests are kept, from the configuration (static
// keys) or in the principals table (minted keys).
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/agq/agq/internal/names"
	"github.com/agq/agq/store"
)

// Roles a principal can have.
const (
	RoleAdmin    = "admin"
	RoleWorker   = "worker"
	RoleProducer = "producer"
	// RoleViewer reads everything and changes nothing: the dashboard's
	// read-only sign-in, and read-only redis-cli sessions.
	RoleViewer = "viewer"
)

// Errors returned by the keyring.
var (
	// ErrBadCredentials means the key is unknown, revoked, or not the named principal's.
	ErrBadCredentials = errors.New("invalid username-password pair or user is disabled")
	// ErrBadRole means a role other than admin, worker, producer or viewer.
	ErrBadRole = errors.New("role must be admin, worker, producer or viewer")
	// ErrBadPrincipal means a principal name that is empty, too long or has odd characters.
	ErrBadPrincipal = errors.New("principal names are 1-64 characters of letters, digits, '_', '-', '.', '@'")
	// ErrStaticPrincipal means the principal's key comes from the configuration file.
	ErrStaticPrincipal = errors.New("the key of this principal comes from the configuration; change it there")
	// ErrLastAdmin refuses to revoke the only admin key: nobody could mint keys.
	ErrLastAdmin = errors.New("cannot revoke the last admin key")
	// ErrNoAdmin means no admin key is valid anywhere: nobody could mint keys.
	ErrNoAdmin = errors.New("no admin key is valid")
	// ErrUnknownPrincipal means no such principal exists.
	ErrUnknownPrincipal = errors.New("no such principal")
)

// Principal is an authenticated identity.
type Principal struct {
	Name   string
	Role   string
	Source string // config, minted or generated
	// Digest is the digest of the key the principal authenticated with.
	Digest [32]byte
}

// Entry is one row of KEY.LIST.
type Entry struct {
	Principal
	CreatedAt string
}

type staticKey struct {
	digest [32]byte
	Principal
}

// Keyring authenticates keys against static configuration and the store.
type Keyring struct {
	store  *store.Store
	static []staticKey
}

// StaticKeys are keys from configuration, by role then principal; values are
// a key or "sha256:<hex digest>".
type StaticKeys map[string]map[string]string

// NewKeyring validates the static keys and returns a keyring.
func NewKeyring(st *store.Store, static StaticKeys, source map[string]string) (*Keyring, error) {
	k := &Keyring{store: st}
	for role, entries := range static {
		if !validRole(role) {
			return nil, fmt.Errorf("%w: %q", ErrBadRole, role)
		}
		for name, spec := range entries {
			if !names.Principal(name) {
				return nil, fmt.Errorf("principal %q: %w", name, ErrBadPrincipal)
			}
			digest, err := ParseKeySpec(spec)
			if err != nil {
				return nil, fmt.Errorf("key of %q: %w", name, err)
			}
			src := source[role]
			if src == "" {
				src = "config"
			}
			k.static = append(k.static, staticKey{digest: digest, Principal: Principal{Name: name, Role: role, Source: src}})
		}
	}
	// Map order is random; KEY.LIST shows them in a stable order.
	slices.SortFunc(k.static, func(a, b staticKey) int { return strings.Compare(a.Name, b.Name) })
	return k, nil
}

// HasStaticAdmin reports whether configuration supplies an admin key.
func (k *Keyring) HasStaticAdmin() bool {
	for _, s := range k.static {
		if s.Role == RoleAdmin {
			return true
		}
	}
	return false
}

// Authenticate checks key, and user when it is given. user may be empty or
// "default" (any principal), the principal's name, or — for worker keys — the
// worker id the connection will act as, which must look like one. Whose the
// id is, WORKER.REGISTER says (NOPERM for another principal's).
func (k *Keyring) Authenticate(ctx context.Context, user, key string) (Principal, error) {
	digest := Digest(key)
	p, err := k.lookup(ctx, digest)
	if err != nil {
		return Principal{}, err
	}
	if user == "" || user == "default" || user == p.Name {
		return p, nil
	}
	if p.Role != RoleWorker || !names.Worker(user) {
		return Principal{}, ErrBadCredentials
	}
	return p, nil
}

func (k *Keyring) lookup(ctx context.Context, digest [32]byte) (Principal, error) {
	for _, s := range k.static {
		if subtle.ConstantTimeCompare(s.digest[:], digest[:]) == 1 {
			p := s.Principal
			p.Digest = digest
			return p, nil
		}
	}
	row, err := k.store.PrincipalByDigest(ctx, digest[:])
	if errors.Is(err, store.ErrNotFound) {
		return Principal{}, ErrBadCredentials
	}
	if err != nil {
		return Principal{}, fmt.Errorf("looking up key: %w", err)
	}
	// The row was found by its digest; compare again in constant time so the
	// decision never rests on a variable-time comparison.
	if subtle.ConstantTimeCompare(row.KeyDigest, digest[:]) != 1 {
		return Principal{}, ErrBadCredentials
	}
	return Principal{Name: row.Name, Role: row.Role, Source: row.Source, Digest: digest}, nil
}

// Create mints a key for principal with role, replacing any key it had, and
// returns the key; it is not stored anywhere in clear.
func (k *Keyring) Create(ctx context.Context, role, name string) (string, error) {
	if !validRole(role) {
		return "", ErrBadRole
	}
	if !names.Principal(name) {
		return "", ErrBadPrincipal
	}
	if k.isStatic(name) {
		return "", ErrStaticPrincipal
	}
	key := GenerateKey()
	d := Digest(key)
	if err := k.store.PrincipalPut(ctx, store.Principal{Name: name, Role: role, KeyDigest: d[:], Source: "minted"}); err != nil {
		return "", fmt.Errorf("storing key: %w", err)
	}
	return key, nil
}

// Revoke revokes a minted key. Revoking an already revoked key succeeds.
func (k *Keyring) Revoke(ctx context.Context, name string) error {
	if k.isStatic(name) {
		return ErrStaticPrincipal
	}
	err := k.store.PrincipalRevoke(ctx, name, k.HasStaticAdmin())
	switch {
	case errors.Is(err, store.ErrNotFound):
		return ErrUnknownPrincipal
	case errors.Is(err, store.ErrLastAdmin):
		return ErrLastAdmin
	}
	return err
}

// List returns every live principal, static ones included.
func (k *Keyring) List(ctx context.Context) ([]Entry, error) {
	rows, err := k.store.PrincipalList(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(rows)+len(k.static))
	for _, s := range k.static {
		out = append(out, Entry{Principal: s.Principal})
	}
	for _, r := range rows {
		out = append(out, Entry{Principal: Principal{Name: r.Name, Role: r.Role, Source: r.Source}, CreatedAt: r.CreatedAt.UTC().Format("2006-01-02T15:04:05Z")})
	}
	return out, nil
}

func (k *Keyring) isStatic(name string) bool {
	for _, s := range k.static {
		if s.Name == name {
			return true
		}
	}
	return false
}

func validRole(r string) bool {
	return r == RoleAdmin || r == RoleWorker || r == RoleProducer || r == RoleViewer
}

// GenerateKey returns 32 random bytes as 64 hex characters.
func GenerateKey() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err))
	}
	return hex.EncodeToString(b[:])
}

// Digest is the SHA-256 of a key.
func Digest(key string) [32]byte { return sha256.Sum256([]byte(key)) }

// ParseKeySpec turns a configured key ("<key>" or "sha256:<64 hex>") into its digest.
func ParseKeySpec(spec string) ([32]byte, error) {
	var d [32]byte
	if hexDigest, ok := strings.CutPrefix(spec, "sha256:"); ok {
		raw, err := hex.DecodeString(hexDigest)
		if err != nil || len(raw) != 32 {
			return d, errors.New("sha256: must be followed by 64 hex characters")
		}
		copy(d[:], raw)
		return d, nil
	}
	if spec == "" {
		return d, errors.New("empty key")
	}
	return Digest(spec), nil
}

// StillValid reports whether the key a principal authenticated with is
// still live: static keys always are; stored ones unless revoked or
// replaced since.
func (k *Keyring) StillValid(ctx context.Context, p Principal) (bool, error) {
	for _, s := range k.static {
		if subtle.ConstantTimeCompare(s.digest[:], p.Digest[:]) == 1 {
			return true, nil
		}
	}
	row, err := k.store.PrincipalByDigest(ctx, p.Digest[:])
	if errors.Is(err, store.ErrNotFound) {
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
	return k.store.PrincipalExists(ctx, name)
}
