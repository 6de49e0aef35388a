package node_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/internal/auth/keyring"
	"github.com/agq/agq/internal/config"
	"github.com/agq/agq/internal/node"
)

// lockedBuffer is a log destination the node writes from its goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// readyLine starts a node with cfg and returns the fields of its
// "agq ready" log line, and its log.
func readyLine(t *testing.T, cfg config.Config) (*node.Node, map[string]any, *lockedBuffer) {
	t.Helper()
	out := lockedBuffer{}
	n, err := node.Start(ctxT(t, time.Minute), cfg, zerolog.New(&out).Level(zerolog.DebugLevel))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	out.mu.Lock()
	defer out.mu.Unlock()
	sc := bufio.NewScanner(bytes.NewReader(out.buf.Bytes()))
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) == nil && line["message"] == "agq ready" {
			return n, line, &out
		}
	}
	t.Fatalf("no agq ready line in:\n%s", out.buf.String())
	return nil, nil, nil
}

func TestReadyLineSaysWhereEverythingIs(t *testing.T) {
	t.Run("HTTPSDashboardUnderItsPrefix", func(t *testing.T) {
		p := newPKI(t)
		cfg := agqtest.DefaultConfig(t)
		cfg.TLSListen = "127.0.0.1:0"
		cfg.TLSCertFile, cfg.TLSKeyFile = p.certFile, p.keyFile
		cfg.UIPrefix = "/agq/"
		n, line, log := readyLine(t, cfg)
		url := "https://" + n.HTTPAddr() + "/agq/"
		if line["dashboard"] != url || line["listen"] != n.RESPAddr() || line["tls_listen"] != n.TLSAddr() ||
			line["admin_key"] != "AGQ_ADMIN_KEY (--admin-key)" {
			t.Fatalf("ready line %v; want dashboard %s, listen %s, tls_listen %s", line, url, n.RESPAddr(), n.TLSAddr())
		}
		// The URL printed is the one the dashboard answers on.
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: p.clientConfig(t, false)}, Timeout: 10 * time.Second}
		res, err := hc.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", url, res.Status)
		}

		// A browser that does not trust the CA fails its handshake: the
		// node's log stays JSON (net/http's own line goes to it at debug).
		untrusting := &http.Client{Timeout: 10 * time.Second}
		if _, err := untrusting.Get(url); err == nil {
			t.Fatal("a client without the CA trusted the side port")
		}
		agqtest.Eventually(t, 10*time.Second, func() error {
			log.mu.Lock()
			defer log.mu.Unlock()
			sc := bufio.NewScanner(bytes.NewReader(log.buf.Bytes()))
			for sc.Scan() {
				var line map[string]any
				if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
					t.Fatalf("a log line is not JSON: %q", sc.Text())
				}
				if line["component"] == "http" && strings.Contains(fmt.Sprint(line["message"]), "TLS handshake error") {
					return nil
				}
			}
			return errors.New("no debug line for the failed handshake")
		})
	})

	t.Run("MintedKeyAndPlainHTTP", func(t *testing.T) {
		cfg := agqtest.DefaultConfig(t)
		cfg.AdminKey = ""
		n, line, _ := readyLine(t, cfg)
		if want := filepath.Join(cfg.DataDir, keyring.AdminKeyFile); line["admin_key"] != want {
			t.Fatalf("admin_key %v, want %s", line["admin_key"], want)
		}
		if want := "http://" + n.HTTPAddr() + "/"; line["dashboard"] != want {
			t.Fatalf("dashboard %v, want %s", line["dashboard"], want)
		}
	})

	t.Run("NoDashboardNoURL", func(t *testing.T) {
		cfg := agqtest.DefaultConfig(t)
		cfg.UI = false
		if _, line, _ := readyLine(t, cfg); line["dashboard"] != nil {
			t.Fatalf("with the dashboard off the ready line names %v", line["dashboard"])
		}
	})
}
