// Package auth checks session keys. Keys are 32 random bytes shown once as
// hex; only their SHA-256 digests are kept, from the configuration (static
// keys) or in the principals table (minted keys).
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/agq/agq/records"
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
	// Namespace is the namespace the key acts in; "" for an admin or a
	// viewer of every namespace (whose connections start in the default
	// one and may move).
	Namespace string
	// Digest is the digest of the key the principal authenticated with.
	Digest [32]byte
}

// Home is the namespace the principal's connections start in: its key's,
// or the default one for a key of every namespace.
func (p Principal) Home() string {
	if p.Namespace == "" {
		return records.DefaultNamespace
	}
	return p.Namespace
}

// Entry is one row of KEY.LIST.
type Entry struct {
	Principal
	CreatedAt string
}

// StaticKeys are keys from configuration, by role then principal; values are
// a key or "sha256:<hex digest>".
type StaticKeys map[string]map[string]string

// Keys checks and manages session keys; internal/auth/keyring keeps them
// in configuration and the database.
type Keys interface {
	// Authenticate checks key, and user when it is given.
	Authenticate(ctx context.Context, user, key string) (Principal, error)
	// StillValid reports whether the key p authenticated with is still live.
	StillValid(ctx context.Context, p Principal) (bool, error)
	// IsPrincipal reports whether name is a principal's.
	IsPrincipal(ctx context.Context, name string) (bool, error)
	// Create mints a key for principal name with role, acting in
	// namespace (for an admin or a viewer "" is every namespace; for the
	// other roles "" is the default one), and returns it.
	Create(ctx context.Context, role, name, namespace string) (string, error)
	// Revoke revokes a minted key; within, when not "", the principal
	// must be of that namespace (another's is unknown there).
	Revoke(ctx context.Context, name, within string) error
	// List returns every live principal; within, when not "", those of
	// that namespace only.
	List(ctx context.Context, within string) ([]Entry, error)
}

// ValidRole reports whether r is one of the roles.
func ValidRole(r string) bool {
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
