package node_test

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/internal/config"
)

// testPKI is a CA with a server certificate for 127.0.0.1 and a client
// certificate, written as PEM files.
type testPKI struct {
	dir                           string
	ca                            *x509.Certificate
	caKey                         *ecdsa.PrivateKey
	caFile, certFile, keyFile     string
	clientCertFile, clientKeyFile string
	pool                          *x509.CertPool
}

func newPKI(t *testing.T) *testPKI {
	t.Helper()
	p := &testPKI{dir: t.TempDir()}
	p.caKey = newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "agq test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &p.caKey.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	if p.ca, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	p.caFile = p.write(t, "ca.pem", "CERTIFICATE", der)
	p.pool = x509.NewCertPool()
	p.pool.AddCert(p.ca)
	p.certFile, p.keyFile = p.issue(t, "server", 2, x509.ExtKeyUsageServerAuth)
	p.clientCertFile, p.clientKeyFile = p.issue(t, "client", 3, x509.ExtKeyUsageClientAuth)
	return p
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// issue signs a certificate for 127.0.0.1 named name with serial, and
// writes name.pem and name-key.pem.
func (p *testPKI) issue(t *testing.T, name string, serial int64, usage x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return p.write(t, name+".pem", "CERTIFICATE", der), p.write(t, name+"-key.pem", "PRIVATE KEY", keyDER)
}

func (p *testPKI) write(t *testing.T, name, kind string, der []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func (p *testPKI) clientConfig(t *testing.T, withCert bool) *tls.Config {
	t.Helper()
	conf := &tls.Config{RootCAs: p.pool, MinVersion: tls.VersionTLS12}
	if withCert {
		cert, err := tls.LoadX509KeyPair(p.clientCertFile, p.clientKeyFile)
		if err != nil {
			t.Fatal(err)
		}
		conf.Certificates = []tls.Certificate{cert}
	}
	return conf
}

// startTLS starts agq with only the TLS listener, client certificates as
// authClients says.
func startTLS(t *testing.T, p *testPKI, authClients string, opts ...func(*config.Config)) *agqtest.Agq {
	t.Helper()
	cfg := agqtest.DefaultConfig(t)
	cfg.Listen = ""
	cfg.TLSListen = "127.0.0.1:0"
	cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSCACertFile = p.certFile, p.keyFile, p.caFile
	cfg.TLSAuthClients = authClients
	for _, o := range opts {
		o(&cfg)
	}
	return agqtest.StartConfig(t, cfg)
}

func TestTLS(t *testing.T) {
	p := newPKI(t)
	a := startTLS(t, p, "yes")
	addr := a.Node.TLSAddr()
	if a.Node.RESPAddr() != "" {
		t.Fatalf("listen off still listens on %s", a.Node.RESPAddr())
	}

	t.Run("GoRedisRunsAJob", func(t *testing.T) {
		ctx := ctxT(t, 30*time.Second)
		admin := redis.NewClient(&redis.Options{Addr: addr, Password: a.AdminKey, TLSConfig: p.clientConfig(t, true)})
		defer admin.Close()
		key, err := admin.Do(ctx, "KEY.CREATE", "worker", "tls-worker").Text()
		if err != nil {
			t.Fatal(err)
		}
		w := redis.NewClient(&redis.Options{Addr: addr, Username: "tls-worker", Password: key, TLSConfig: p.clientConfig(t, true)})
		defer w.Close()
		reg := `{"worker_id":"tls-worker","hostname":"h","agw_version":"0","capabilities":{"tools":["t"]}}`
		if err := w.Do(ctx, "WORKER.REGISTER", reg).Err(); err != nil {
			t.Fatal(err)
		}
		if err := admin.Do(ctx, "JOB.SUBMIT", `{"job_id":"over-tls","queue":"tls","type":"t"}`).Err(); err != nil {
			t.Fatal(err)
		}
		res, err := w.BRPop(ctx, 5*time.Second, "queue:tls").Result()
		if err != nil {
			t.Fatal(err)
		}
		var job struct {
			Attempt  int    `json:"attempt"`
			Delivery string `json:"delivery"`
		}
		if err := json.Unmarshal([]byte(res[1]), &job); err != nil {
			t.Fatal(err)
		}
		done := fmt.Sprintf(`{"status":"completed","attempt":%d,"delivery":%q}`, job.Attempt, job.Delivery)
		if err := w.Do(ctx, "JOB.UPDATE", "over-tls", done).Err(); err != nil {
			t.Fatal(err)
		}
		if raw, err := admin.Do(ctx, "JOB.GET", "over-tls").Text(); err != nil || !strings.Contains(raw, `"status":"completed"`) {
			t.Fatalf("JOB.GET = %s, %v", raw, err)
		}
	})

	t.Run("RedisCLIPings", func(t *testing.T) {
		host, port, _ := net.SplitHostPort(addr)
		out, err := exec.Command(agqtest.RedisCLIPath(t), "-h", host, "-p", port, "--tls", "--cacert", p.caFile,
			"--cert", p.clientCertFile, "--key", p.clientKeyFile, "--no-auth-warning", "-a", a.AdminKey, "PING").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "PONG" {
			t.Fatalf("redis-cli --tls PING = %q, %v", out, err)
		}
	})

	t.Run("AClientWithoutACertificateIsRefused", func(t *testing.T) {
		c := redis.NewClient(&redis.Options{Addr: addr, Password: a.AdminKey, TLSConfig: p.clientConfig(t, false), MaxRetries: -1})
		defer c.Close()
		if err := c.Ping(ctxT(t, 10*time.Second)).Err(); err == nil {
			t.Fatal("a client without a certificate was served")
		}
	})

	t.Run("APlaintextClientIsClosed", func(t *testing.T) {
		c := redis.NewClient(&redis.Options{Addr: addr, Password: a.AdminKey, MaxRetries: -1})
		defer c.Close()
		if err := c.Ping(ctxT(t, 10*time.Second)).Err(); err == nil {
			t.Fatal("a plaintext client was served on the TLS port")
		}
	})

	t.Run("HTTPSideIsHTTPS", func(t *testing.T) {
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: p.clientConfig(t, false)}, Timeout: 10 * time.Second}
		res, err := hc.Get("https://" + a.HTTPAddr + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET /healthz over HTTPS: %s", res.Status)
		}
	})
}

func TestTLSReloadKeepsOpenConnections(t *testing.T) {
	p := newPKI(t)
	a := startTLS(t, p, "no")
	addr := a.Node.TLSAddr()
	ctx := ctxT(t, 30*time.Second)
	serial := func(c *tls.Conn) int64 { return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64() }

	old, err := tls.Dial("tcp", addr, p.clientConfig(t, false))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if serial(old) != 2 {
		t.Fatalf("first certificate serial %d", serial(old))
	}

	// Replace the files on disk, then reload as SIGHUP does.
	cert, key := p.issue(t, "server-next", 20, x509.ExtKeyUsageServerAuth)
	for from, to := range map[string]string{cert: p.certFile, key: p.keyFile} {
		if err := os.Rename(from, to); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Node.Reload(); err != nil {
		t.Fatal(err)
	}

	fresh, err := tls.Dial("tcp", addr, p.clientConfig(t, false))
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if serial(fresh) != 20 {
		t.Fatalf("a new connection after the reload got serial %d, want 20", serial(fresh))
	}
	// The connection made before the reload still works.
	old.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := old.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(old).ReadString('\n')
	if err != nil || line != "+PONG\r\n" {
		t.Fatalf("PING on the old connection = %q, %v", line, err)
	}

	// A broken file leaves the certificate in use.
	if err := os.WriteFile(p.certFile, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Node.Reload(); err == nil {
		t.Fatal("reloading a broken certificate succeeded")
	}
	c := redis.NewClient(&redis.Options{Addr: addr, Password: a.AdminKey, TLSConfig: p.clientConfig(t, false)})
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after a failed reload: %v", err)
	}
}

// A connection that never sends its ClientHello is closed by the auth
// timeout, as an unauthenticated one is.
func TestTLSHandshakeThatNeverEndsIsClosedByTheAuthTimeout(t *testing.T) {
	p := newPKI(t)
	a := startTLS(t, p, "no", func(c *config.Config) { c.AuthTimeout = 500 * time.Millisecond })
	raw, err := net.Dial("tcp", a.Node.TLSAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	start := time.Now()
	raw.SetReadDeadline(time.Now().Add(10 * time.Second))
	var buf [64]byte
	_, err = raw.Read(buf[:])
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("after %s: read %v; want the connection closed by the auth timeout", time.Since(start), err)
	}
}
