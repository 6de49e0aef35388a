package agqtest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// InNamespace creates namespace ns (if it is not there) and a key of role
// for principal in it, and returns a client authenticated with that key.
func (a *Agq) InNamespace(t testing.TB, ns, role, principal string) *redis.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin := a.Admin(t)
	if err := admin.Do(ctx, "NAMESPACE.CREATE", ns).Err(); err != nil {
		t.Fatalf("agqtest: NAMESPACE.CREATE %s: %v", ns, err)
	}
	key, err := admin.Do(ctx, "KEY.CREATE", role, principal, "NAMESPACE", ns).Text()
	if err != nil {
		t.Fatalf("agqtest: KEY.CREATE %s %s NAMESPACE %s: %v", role, principal, ns, err)
	}
	return a.Client(t, redis.Options{Username: principal, Password: key})
}
