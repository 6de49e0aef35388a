package node

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/agq/agq/internal/config"
)

// certificates serves the configured certificate and CA to TLS handshakes
// and reads the files again on reload; connections already open keep the
// certificate they were made with.
type certificates struct {
	certFile, keyFile, caFile string
	clientAuth                tls.ClientAuthType

	mu   sync.RWMutex
	cert *tls.Certificate
	cas  *x509.CertPool
}

func newCertificates(cfg config.Config) (*certificates, error) {
	c := &certificates{certFile: cfg.TLSCertFile, keyFile: cfg.TLSKeyFile, caFile: cfg.TLSCACertFile}
	if c.caFile != "" {
		c.clientAuth = map[string]tls.ClientAuthType{
			"yes":      tls.RequireAndVerifyClientCert,
			"optional": tls.VerifyClientCertIfGiven,
			"no":       tls.NoClientCert,
		}[cfg.TLSAuthClients]
	}
	return c, c.load()
}

// load reads the files; on an error the certificates in use stay.
func (c *certificates) load() error {
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return fmt.Errorf("loading TLS certificate: %w", err)
	}
	var cas *x509.CertPool
	if c.caFile != "" {
		pem, err := os.ReadFile(c.caFile)
		if err != nil {
			return fmt.Errorf("loading TLS CA certificates: %w", err)
		}
		cas = x509.NewCertPool()
		if !cas.AppendCertsFromPEM(pem) {
			return errors.New("loading TLS CA certificates: no PEM certificate in " + c.caFile)
		}
	}
	c.mu.Lock()
	c.cert, c.cas = &cert, cas
	c.mu.Unlock()
	return nil
}

func (c *certificates) certificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.cert, nil
}

// serverConfig is the RESP listener's: TLS 1.2 or later, Go's cipher
// suites, client certificates as configured.
func (c *certificates) serverConfig() *tls.Config {
	base := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: c.certificate, ClientAuth: c.clientAuth}
	if c.caFile == "" {
		return base
	}
	withCAs := base.Clone()
	withCAs.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c.mu.RLock()
		defer c.mu.RUnlock()
		conf := base.Clone()
		conf.ClientCAs = c.cas
		return conf, nil
	}
	return withCAs
}

// httpConfig is the side port's: the same certificate, no client
// certificates, so that probes and browsers need none.
func (c *certificates) httpConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: c.certificate}
}
