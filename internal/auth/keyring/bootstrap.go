package keyring

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/agq/agq/internal/auth"
	"github.com/agq/agq/records"
)

// AdminKeyFile is the name of the generated admin key inside the data dir.
const AdminKeyFile = "admin.key"

// EnsureAdmin makes sure some admin can connect. When configuration gives no
// admin key and the data dir holds a generated one, that key is (re)stored;
// when there is no admin anywhere, a key is minted and written to
// <dataDir>/admin.key with mode 0600. It returns the path written, if any.
func (k *Keyring) EnsureAdmin(ctx context.Context, dataDir string) (written string, err error) {
	if k.HasStaticAdmin() {
		return "", nil
	}
	path := filepath.Join(dataDir, AdminKeyFile)
	if raw, err := os.ReadFile(path); err == nil {
		key := strings.TrimSpace(string(raw))
		if key == "" {
			return "", fmt.Errorf("%s is empty; delete it to mint a new admin key", path)
		}
		// Stored only into a database that never had an admin principal
		// (a new database): a revoked admin key must stay revoked.
		d := auth.Digest(key)
		if _, err := k.store.PrincipalPutIfAbsent(ctx, records.Key{Name: "admin", Role: auth.RoleAdmin, KeyDigest: d[:], Source: "generated"}, false); err != nil {
			return "", fmt.Errorf("storing admin key: %w", err)
		}
		exists, err := k.store.AdminExists(ctx)
		if err != nil {
			return "", err
		}
		if !exists {
			return "", fmt.Errorf("%w: the key in %s was revoked; delete the file to mint a new one", auth.ErrNoAdmin, path)
		}
		return "", nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("reading admin key: %w", err)
	}
	exists, err := k.store.AdminExists(ctx)
	if err != nil || exists {
		return "", err
	}
	key := auth.GenerateKey()
	d := auth.Digest(key)
	created, err := k.store.PrincipalPutIfAbsent(ctx, records.Key{Name: "admin", Role: auth.RoleAdmin, KeyDigest: d[:], Source: "generated"}, true)
	if err != nil {
		return "", fmt.Errorf("storing admin key: %w", err)
	}
	if !created {
		// Another agq node minted it first; its data dir holds the key.
		return "", nil
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", fmt.Errorf("creating data dir: %w", err)
	}
	if err := os.WriteFile(path, []byte(key+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("writing admin key: %w", err)
	}
	return path, nil
}
