package store_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/store"
)

// Nodes starting together on a fresh database all read the one secret
// that was stored, whichever node stored it.
func TestDashboardSecretRacingNodesShareOne(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := agqtest.NewDatabase(t)
	const nodes = 8
	stores := make([]*store.Store, nodes)
	for i := range stores {
		st, err := store.Open(ctx, store.Config{URL: url, MaxConns: 2})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		stores[i] = st
	}
	secrets := make([][]byte, nodes)
	errs := make([]error, nodes)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, st := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			secrets[i], errs[i] = st.DashboardSecret(ctx, bytes.Repeat([]byte{byte(i + 1)}, 32))
		}()
	}
	close(start)
	wg.Wait()
	for i := range stores {
		if errs[i] != nil {
			t.Fatalf("node %d: %v", i, errs[i])
		}
		if len(secrets[i]) != 32 || !bytes.Equal(secrets[i], secrets[0]) {
			t.Fatalf("node %d read secret %x, node 0 read %x", i, secrets[i], secrets[0])
		}
	}
}
