package node

import (
	"testing"

	"github.com/agq/agq/internal/config"
)

func TestDashboardURL(t *testing.T) {
	on := config.Config{UI: true, UIPrefix: "/"}
	for _, tc := range []struct {
		addr  string
		https bool
		cfg   config.Config
		want  string
	}{
		{"127.0.0.1:6381", false, on, "http://127.0.0.1:6381/"},
		{"127.0.0.1:6381", true, on, "https://127.0.0.1:6381/"},
		{"0.0.0.0:6381", false, on, "http://localhost:6381/"},
		{"[::]:6381", true, on, "https://localhost:6381/"},
		{"[::1]:6381", false, on, "http://[::1]:6381/"},
		{"10.0.0.5:80", false, config.Config{UI: true, UIPrefix: "/agq/"}, "http://10.0.0.5:80/agq/"},
		{"127.0.0.1:6381", false, config.Config{UI: false, UIPrefix: "/"}, ""},
		{"", false, on, ""},
	} {
		if got := dashboardURL(tc.addr, tc.https, tc.cfg); got != tc.want {
			t.Errorf("dashboardURL(%q, %v, %+v) = %q, want %q", tc.addr, tc.https, tc.cfg, got, tc.want)
		}
	}
}
