package e2e

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
)

// tlsSetup is agq running as a process over TLS, set up with the blocks
// of docs/operations.md in dir.
type tlsSetup struct {
	dir, addr, httpAddr string
	agq                 *process
	// subst adapts a block of the page to the test: its ports and binaries.
	subst func(string) string
}

// TestTLSAsDocumented runs the TLS section of docs/operations.md as
// printed: openssl makes the CA and the certificates, the built agq serves
// only TLS and requires client certificates, agw and redis-py run jobs
// over it, redis-cli and the go-redis program submit and wait, the
// dashboard loads in Chromium over HTTPS, and SIGHUP swaps the certificate
// under open connections.
//
// Parallel only once the go-redis program is built: buildCookbookWorker
// builds in one directory per process.
func TestTLSAsDocumented(t *testing.T) {
	page := readPage(t, "operations.md")
	s := &tlsSetup{dir: t.TempDir(), addr: agqtest.StableAddr(t), httpAddr: agqtest.StableAddr(t)}
	_, port, _ := net.SplitHostPort(s.addr)
	agq, agw := agqBinary(t), agwBinary(t)
	s.subst = strings.NewReplacer(
		"127.0.0.1:6390", s.addr, "-p 6390", "-p "+port, "port=6390", "port="+port,
		"go run ./cmd/agq", "exec '"+agq+"'", "go run ./cmd/agw", "exec '"+agw+"'",
	).Replace
	goClient := buildCookbookWorker(t, s.subst(fencedBlock(t, page, "```go title=\"tls-client.go\"")))
	t.Parallel()
	bash(t, s.dir, fencedBlock(t, page, "```sh title=\"certificates.sh\""))

	cmd := exec.Command("bash", "-c", s.subst(fencedBlock(t, page, "```sh title=\"agq over TLS\"")))
	cmd.Dir = s.dir
	cmd.Env = append(cleanEnv(), "AGQ_DATABASE_URL="+agqtest.NewDatabase(t), "AGQ_HTTP_LISTEN="+s.httpAddr,
		"AGQ_LOG_FORMAT=json", "AGQ_HEARTBEAT_INTERVAL=1s")
	s.agq = startProcess(t, "agq", cmd)
	s.agq.waitLog(t, 90*time.Second, msg("agq ready"))
	admin := s.goRedis(t, "", s.adminKey(t))

	t.Run("TheReadyLineNamesTheHTTPSDashboard", func(t *testing.T) {
		if !s.agq.logContains(msg("agq ready"), `"dashboard":"https://`+s.httpAddr+`/"`) {
			t.Fatal("the ready line does not name the dashboard at its https URL")
		}
	})

	t.Run("AgwRunsJobsSubmittedWithRedisCLIAndGoRedis", func(t *testing.T) {
		agwCmd := exec.Command("bash", "-c", s.subst(fencedBlock(t, page, "```sh title=\"agw over TLS\"")))
		agwCmd.Dir = s.dir
		agwCmd.Env = append(cleanEnv(), "AGW_LOG_FORMAT=json", "AGW_SHUTDOWN_TIMEOUT=10s")
		w := startProcess(t, "agw", agwCmd)
		waitWorker(t, admin, "worker-001", "ACTIVE")

		out := bash(t, s.dir, s.subst(fencedBlock(t, page, "```sh title=\"redis-cli over TLS\"")))
		id, raw, _ := strings.Cut(out, "\n")
		if id != "tls-hello" {
			t.Fatalf("JOB.SUBMIT printed %q", out)
		}
		j := decodeJob(t, raw)
		if j.Status != "completed" || j.worker() != "worker-001" || !strings.Contains(string(j.Result), `hello over TLS\n`) {
			t.Fatalf("JOB.WAIT printed %s", raw)
		}

		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		goCmd := exec.CommandContext(ctx, goClient)
		goCmd.Dir = s.dir
		goCmd.Env = append(cleanEnv(), "AGQ_KEY="+s.adminKey(t))
		out2, err := goCmd.CombinedOutput()
		if err != nil {
			t.Fatalf("tls-client.go: %v\n%s", err, out2)
		}
		if j := decodeJob(t, strings.TrimSpace(string(out2))); j.Status != "completed" || j.worker() != "worker-001" ||
			!strings.Contains(string(j.Result), `hello from go-redis\n`) {
			t.Fatalf("tls-client.go printed %s", out2)
		}
		w.signal(t, syscall.SIGTERM)
		if code := w.waitExit(t, 30*time.Second); code != 0 {
			t.Fatalf("agw exited %d after SIGTERM", code)
		}
		if w.logContains(s.readFile(t, "worker.key")) {
			t.Error("agw logged its key")
		}
	})

	t.Run("RedisPyRunsAJob", func(t *testing.T) {
		script := filepath.Join(s.dir, "tls_worker.py")
		if err := os.WriteFile(script, []byte(s.subst(fencedBlock(t, page, "```python title=\"tls_worker.py\""))), 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		py := exec.CommandContext(ctx, "/usr/bin/python3", script)
		py.Dir = s.dir
		out, err := py.CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "completed HELLO" {
			t.Fatalf("tls_worker.py: %v\n%s", err, out)
		}
		if j := getJob(t, admin, "py-tls"); j.Status != "completed" || j.worker() != "py-worker" {
			t.Fatalf("py-tls: %+v", j)
		}
	})

	t.Run("ClientsWithoutACertificateOrWithoutTLSAreRefused", func(t *testing.T) {
		for name, args := range map[string][]string{
			"no client certificate": {"--tls", "--cacert", "ca.pem"},
			"plaintext":             nil,
		} {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c := exec.CommandContext(ctx, agqtest.RedisCLIPath(t), append(append([]string{"-p", port}, args...), "PING")...)
			c.Dir = s.dir
			c.Env = append(cleanEnv(), "REDISCLI_AUTH="+s.adminKey(t))
			if out, err := c.CombinedOutput(); strings.TrimSpace(string(out)) == "PONG" {
				t.Errorf("redis-cli with %s was served: %q, %v", name, out, err)
			}
		}
		noCert := redis.NewClient(&redis.Options{Addr: s.addr, Password: s.adminKey(t), MaxRetries: -1, TLSConfig: s.tlsConfig(t, false)})
		defer noCert.Close()
		if err := noCert.Ping(context.Background()).Err(); err == nil {
			t.Error("go-redis without a client certificate was served")
		}
	})

	t.Run("DashboardInChromiumOverHTTPS", func(t *testing.T) { s.dashboardInChromium(t) })

	t.Run("SIGHUPSwapsTheCertificateUnderOpenConnections", func(t *testing.T) { s.reloadOnSIGHUP(t) })
}

// goRedis is a go-redis client with the TLS settings of the page's
// tls-client.go.
func (s *tlsSetup) goRedis(t *testing.T, user, key string) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: s.addr, Username: user, Password: key, MaxRetries: -1, TLSConfig: s.tlsConfig(t, true)})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// tlsConfig trusts the page's CA and presents its client certificate
// when withCert, as the page's go-redis example does.
func (s *tlsSetup) tlsConfig(t *testing.T, withCert bool) *tls.Config {
	t.Helper()
	caPEM := []byte(s.readFile(t, "ca.pem"))
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	conf := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if withCert {
		cert, err := tls.LoadX509KeyPair(filepath.Join(s.dir, "client.pem"), filepath.Join(s.dir, "client-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		conf.Certificates = []tls.Certificate{cert}
	}
	return conf
}

func (s *tlsSetup) adminKey(t *testing.T) string {
	return s.readFile(t, "agq-data/admin.key")
}

func (s *tlsSetup) readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// dashboardInChromium signs in to the dashboard over HTTPS. Chromium
// trusts the server's key given as a pin, and refuses the page without it:
// the certificate is checked, not ignored.
func (s *tlsSetup) dashboardInChromium(t *testing.T) {
	base := "https://" + s.httpAddr + "/"
	plain := browserAt(t)
	ctx, cancel := context.WithTimeout(plain, 30*time.Second)
	_, err := chromedp.Run(ctx, chromedp.NavigateResponse(base))
	cancel()
	if err == nil || !strings.Contains(err.Error(), "ERR_CERT_AUTHORITY_INVALID") {
		t.Fatalf("a browser that does not trust agq-ca loaded the dashboard: %v", err)
	}

	b := browserAt(t, chromedp.Flag("ignore-certificate-errors-spki-list", spkiPin(t, filepath.Join(s.dir, "server.pem"))))
	res := value(t, b, "loading the sign-in page", chromedp.NavigateResponse(base))
	if res.Status != 200 || res.SecurityDetails == nil || res.SecurityDetails.Issuer != "agq-ca" ||
		res.SecurityDetails.SubjectName != "agq" || !strings.HasPrefix(res.SecurityDetails.Protocol, "TLS 1.") {
		t.Fatalf("the sign-in page: status %d, security %+v", res.Status, res.SecurityDetails)
	}
	// The session cookie is Secure over HTTPS: signing in works only if
	// the browser sends it back.
	run(t, b, "signing in",
		chromedp.WaitVisible(chromedp.ID(`key`)),
		chromedp.SendKeys(chromedp.ID(`key`), s.adminKey(t)),
		chromedp.Click(chromedp.ID(`signin`)),
		chromedp.WaitVisible(chromedp.ID(`queues`)))
	if got := count(t, b, "ready", "waiting"); got != "0" {
		t.Fatalf("queue ready shows %s waiting", got)
	}
	if !value(t, b, "checking the page", chromedp.Evaluate[bool](`location.protocol === "https:" && document.cookie === ""`)) {
		t.Fatal("the page is not on https, or its session cookie is readable from scripts")
	}
}

// spkiPin is Chromium's pin of a certificate's key: base64 of the SHA-256
// of its SubjectPublicKeyInfo.
func spkiPin(t *testing.T, certFile string) string {
	t.Helper()
	cert := parseCert(t, certFile)
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(sum[:])
}

func parseCert(t *testing.T, certFile string) *x509.Certificate {
	t.Helper()
	raw, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(raw)
	if block == nil {
		t.Fatalf("no PEM in %s", certFile)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// reloadOnSIGHUP replaces the certificate and key on disk, sends SIGHUP to
// agq, and checks that new connections get the new certificate while one
// opened before keeps serving commands.
func (s *tlsSetup) reloadOnSIGHUP(t *testing.T) {
	conf := s.tlsConfig(t, true)
	old, err := tls.Dial("tcp", s.addr, conf)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	oldConn := &respConn{t: t, c: old, r: bufio.NewReader(old)}
	if got := oldConn.do("AUTH", s.adminKey(t)); got != "+OK" {
		t.Fatalf("AUTH on the first connection: %s", got)
	}
	if cn := old.ConnectionState().PeerCertificates[0].Subject.CommonName; cn != "agq" {
		t.Fatalf("the first certificate is %q", cn)
	}

	bash(t, s.dir, `set -e
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=agq-next \
  -keyout next-key.pem -out next.csr
openssl x509 -req -in next.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 825 \
  -extfile <(printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth') -out next.pem
mv next.pem server.pem && mv next-key.pem server-key.pem`)
	next := parseCert(t, filepath.Join(s.dir, "server.pem"))
	s.agq.signal(t, syscall.SIGHUP)
	s.agq.waitLog(t, 20*time.Second, msg("TLS certificates reloaded"))

	fresh, err := tls.Dial("tcp", s.addr, conf)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if got := fresh.ConnectionState().PeerCertificates[0]; !got.Equal(next) {
		t.Fatalf("a connection made after SIGHUP got %q (serial %s), want the new %q (serial %s)",
			got.Subject.CommonName, got.SerialNumber, next.Subject.CommonName, next.SerialNumber)
	}
	if err := s.goRedis(t, "", s.adminKey(t)).Ping(context.Background()).Err(); err != nil {
		t.Fatalf("go-redis after SIGHUP: %v", err)
	}
	// The connection from before works on, with the certificate it had.
	if got := oldConn.do("PING"); got != "+PONG" {
		t.Fatalf("PING on the connection from before SIGHUP: %s", got)
	}
	if got := oldConn.do("JOB.GET", "py-tls"); !strings.Contains(got, `"status":"completed"`) {
		t.Fatalf("JOB.GET on the connection from before SIGHUP: %s", got)
	}
	if cn := old.ConnectionState().PeerCertificates[0].Subject.CommonName; cn != "agq" {
		t.Fatalf("the connection from before SIGHUP now shows %q", cn)
	}
}

// respConn sends commands on one connection and reads simple, error and
// bulk replies.
type respConn struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func (rc *respConn) do(args ...string) string {
	rc.t.Helper()
	rc.c.SetDeadline(time.Now().Add(20 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(rc.c, b.String()); err != nil {
		rc.t.Fatalf("sending %s: %v", args[0], err)
	}
	line, err := rc.r.ReadString('\n')
	if err != nil {
		rc.t.Fatalf("reading the reply to %s: %v", args[0], err)
	}
	line = strings.TrimSuffix(line, "\r\n")
	if !strings.HasPrefix(line, "$") || line == "$-1" {
		return line
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil {
		rc.t.Fatalf("reply to %s: %q", args[0], line)
	}
	body := make([]byte, n+2)
	if _, err := io.ReadFull(rc.r, body); err != nil {
		rc.t.Fatalf("reading the reply to %s: %v", args[0], err)
	}
	return string(body[:n])
}

// bash runs script with bash -e in dir and returns what it printed,
// without the last newline.
func bash(t *testing.T, dir, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), "HOME="+t.TempDir())
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("bash: %v\n%s\n--- printed:\n%s%s", err, script, out, stderr)
	}
	return strings.TrimSuffix(string(out), "\n")
}
