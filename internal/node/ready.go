package node

import (
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/agq/agq/internal/auth/keyring"
	"github.com/agq/agq/internal/config"
)

// dashboardURL is the address a browser on this machine opens for the
// dashboard: https when the side port has a certificate, a loopback host
// for a wildcard listener (0.0.0.0 is no place to browse to). "" when the
// side port or the dashboard is off.
func dashboardURL(httpAddr string, https bool, cfg config.Config) string {
	if httpAddr == "" || !cfg.UI {
		return ""
	}
	host, port, err := net.SplitHostPort(httpAddr)
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "localhost"
	}
	scheme := "http://"
	if https {
		scheme = "https://"
	}
	prefix := cfg.UIPrefix
	if !strings.HasPrefix(prefix, "/") {
		prefix = "/" + prefix
	}
	return scheme + net.JoinHostPort(host, port) + prefix
}

// adminKeyWhere says where an admin finds a key to sign in with, never the
// key itself.
func adminKeyWhere(cfg config.Config, minted string) string {
	switch {
	case minted != "":
		return minted
	case cfg.AdminKey != "":
		return "AGQ_ADMIN_KEY (--admin-key)"
	case len(cfg.Admins) > 0:
		return "[admins] of " + cfg.ConfigFile
	}
	path := filepath.Join(cfg.DataDir, keyring.AdminKeyFile)
	if _, err := os.Stat(path); err != nil {
		// Another node sharing the database minted it.
		return "the data dir of the node that minted it"
	}
	return path
}
