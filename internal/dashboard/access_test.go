package dashboard_test

import (
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/agq/agq/internal/agqtest"
	"github.com/agq/agq/internal/config"
)

func TestMain(m *testing.M) { os.Exit(agqtest.Main(m)) }

// browser is a plain HTTP client with a cookie jar that does not follow
// redirects, so each answer can be checked.
type browser struct {
	t    *testing.T
	base string
	c    *http.Client
}

func newBrowser(t *testing.T, base string) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, base: base, c: &http.Client{Jar: jar, Timeout: 20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (b *browser) do(method, path string, form url.Values, header ...string) (*http.Response, string) {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.base+path, body)
	if err != nil {
		b.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := b.c.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return res, string(raw)
}

func (b *browser) signIn(key string) *http.Response {
	b.t.Helper()
	res, _ := b.do("POST", "login", url.Values{"key": {key}})
	return res
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf is the token the overview's forms carry.
func (b *browser) csrf() string {
	b.t.Helper()
	_, page := b.do("GET", "", nil)
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		b.t.Fatalf("no CSRF token on the overview:\n%s", page)
	}
	return m[1]
}

func (b *browser) cookie() *http.Cookie {
	u, _ := url.Parse(b.base)
	for _, c := range b.c.Jar.Cookies(u) {
		if c.Name == "agq_session" {
			return c
		}
	}
	return nil
}

func wantStatus(t *testing.T, what string, res *http.Response, want int) {
	t.Helper()
	if res.StatusCode != want {
		t.Fatalf("%s: status %d, want %d", what, res.StatusCode, want)
	}
}

// paused reads QUEUE.STATS over RESP (a flat array in RESP2, a map in RESP3).
func paused(t *testing.T, a *agqtest.Agq, queue string) bool {
	t.Helper()
	v, err := a.Admin(t).Do(context.Background(), "QUEUE.STATS", queue).Result()
	if err != nil {
		t.Fatal(err)
	}
	switch m := v.(type) {
	case map[any]any:
		return m["paused"] == int64(1)
	case []any:
		for i := 0; i+1 < len(m); i += 2 {
			if m[i] == "paused" {
				return m[i+1] == int64(1)
			}
		}
	}
	t.Fatalf("QUEUE.STATS answered %#v", v)
	return false
}

func redisOptions(key string) redis.Options { return redis.Options{Password: key} }

func TestAccess(t *testing.T) {
	t.Parallel()
	a := agqtest.Start(t)
	ctx := context.Background()
	admin := a.Admin(t)
	if err := admin.Do(ctx, "JOB.SUBMIT", `{"queue":"billing","type":"invoice"}`).Err(); err != nil {
		t.Fatal(err)
	}
	base := "http://" + a.HTTPAddr + "/"

	t.Run("WithoutASessionPagesSendToSignInAndActionsAreRefused", func(t *testing.T) {
		b := newBrowser(t, base)
		for _, path := range []string{"", "queue?name=billing", "job?id=x", "failed", "workers", "schedules", "search?id=x"} {
			res, _ := b.do("GET", path, nil)
			wantStatus(t, "GET /"+path, res, http.StatusSeeOther)
			if loc := res.Header.Get("Location"); loc != "/login" {
				t.Errorf("GET /%s sends to %q", path, loc)
			}
		}
		res, _ := b.do("GET", "", nil, "X-AGQ-Live", "1")
		wantStatus(t, "live refresh", res, http.StatusUnauthorized)
		res, _ = b.do("POST", "action/pause-queue", url.Values{"target": {"billing"}})
		wantStatus(t, "action", res, http.StatusUnauthorized)
		if paused(t, a, "billing") {
			t.Fatal("the queue was paused without a session")
		}
		res, _ = b.do("GET", "healthz", nil)
		wantStatus(t, "healthz beside the dashboard", res, http.StatusOK)
	})

	t.Run("AWrongKeyIsRefused", func(t *testing.T) {
		b := newBrowser(t, base)
		res := b.signIn(strings.Repeat("ab", 32))
		wantStatus(t, "sign-in with a wrong key", res, http.StatusUnauthorized)
		if b.cookie() != nil {
			t.Fatal("a wrong key got a session cookie")
		}
	})

	t.Run("ProducerAndWorkerKeysAreRefused", func(t *testing.T) {
		for _, role := range []string{"producer", "worker"} {
			b := newBrowser(t, base)
			res := b.signIn(a.CreateKey(t, role, "someone-"+role))
			wantStatus(t, role+" sign-in", res, http.StatusForbidden)
			if b.cookie() != nil {
				t.Fatalf("a %s key got a session cookie", role)
			}
		}
	})

	t.Run("AnAdminGetsAStrictHttpOnlyCookieThatHoldsNoKey", func(t *testing.T) {
		b := newBrowser(t, base)
		res := b.signIn(a.AdminKey)
		wantStatus(t, "admin sign-in", res, http.StatusSeeOther)
		var set string
		for _, c := range res.Header.Values("Set-Cookie") {
			if strings.HasPrefix(c, "agq_session=") {
				set = c
			}
		}
		for _, attr := range []string{"HttpOnly", "SameSite=Strict", "Path=/"} {
			if !strings.Contains(set, attr) {
				t.Errorf("cookie %q lacks %s", set, attr)
			}
		}
		payload, _, _ := strings.Cut(b.cookie().Value, ".")
		raw, _ := base64.RawURLEncoding.DecodeString(payload)
		if strings.Contains(set, a.AdminKey) || strings.Contains(string(raw), a.AdminKey) {
			t.Fatal("the cookie carries the key")
		}
		if loc := res.Header.Get("Location"); strings.Contains(loc, a.AdminKey) {
			t.Fatal("the key is in a URL")
		}
		res, page := b.do("GET", "", nil)
		wantStatus(t, "overview", res, http.StatusOK)
		if !strings.Contains(page, `data-queue="billing"`) {
			t.Fatalf("the overview does not show the queue:\n%s", page)
		}
		if res.Header.Get("Content-Security-Policy") == "" || res.Header.Get("X-Frame-Options") != "DENY" {
			t.Error("the page lacks its security headers")
		}
	})

	t.Run("AForgedOrTamperedCookieIsRefused", func(t *testing.T) {
		viewer := newBrowser(t, base)
		wantStatus(t, "viewer sign-in", viewer.signIn(a.CreateKey(t, "viewer", "forger")), http.StatusSeeOther)
		payload, sig, _ := strings.Cut(viewer.cookie().Value, ".")
		raw, _ := base64.RawURLEncoding.DecodeString(payload)
		promoted := base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(raw), `"r":"viewer"`, `"r":"admin"`, 1)))
		for name, value := range map[string]string{
			"tampered": promoted + "." + sig,
			"unsigned": promoted,
			"garbage":  "x.y",
		} {
			b := newBrowser(t, base)
			u, _ := url.Parse(base)
			b.c.Jar.SetCookies(u, []*http.Cookie{{Name: "agq_session", Value: value, Path: "/"}})
			res, _ := b.do("GET", "", nil)
			wantStatus(t, name+" cookie", res, http.StatusSeeOther)
			res, _ = b.do("POST", "action/pause-queue", url.Values{"target": {"billing"}, "csrf": {"x"}})
			wantStatus(t, name+" cookie action", res, http.StatusUnauthorized)
		}
	})

	t.Run("AnActionNeedsItsCSRFToken", func(t *testing.T) {
		b := newBrowser(t, base)
		b.signIn(a.AdminKey)
		token := b.csrf()
		res, _ := b.do("POST", "action/pause-queue", url.Values{"target": {"billing"}})
		wantStatus(t, "no token", res, http.StatusForbidden)
		res, _ = b.do("POST", "action/pause-queue", url.Values{"target": {"billing"}, "csrf": {token + "x"}})
		wantStatus(t, "wrong token", res, http.StatusForbidden)
		other := newBrowser(t, base)
		other.signIn(a.AdminKey)
		res, _ = b.do("POST", "action/pause-queue", url.Values{"target": {"billing"}, "csrf": {other.csrf()}})
		wantStatus(t, "another session's token", res, http.StatusForbidden)
		if paused(t, a, "billing") {
			t.Fatal("the queue was paused without the token")
		}
		res, _ = b.do("POST", "action/pause-queue", url.Values{"target": {"billing"}, "csrf": {token}})
		wantStatus(t, "with the token", res, http.StatusSeeOther)
		if !paused(t, a, "billing") {
			t.Fatal("the queue is not paused")
		}
		res, _ = b.do("POST", "action/resume-queue", url.Values{"target": {"billing"}}, "X-CSRF-Token", token)
		wantStatus(t, "with the token in a header", res, http.StatusSeeOther)
		if paused(t, a, "billing") {
			t.Fatal("the queue is still paused")
		}
	})

	t.Run("AViewerSeesEveryPageAndIsRefusedEveryAction", func(t *testing.T) {
		key := a.CreateKey(t, "viewer", "oncall")
		b := newBrowser(t, base)
		wantStatus(t, "viewer sign-in", b.signIn(key), http.StatusSeeOther)
		for _, path := range []string{"", "queue?name=billing", "failed", "workers", "schedules"} {
			res, page := b.do("GET", path, nil)
			wantStatus(t, "GET /"+path, res, http.StatusOK)
			if strings.Contains(page, `action/`) {
				t.Errorf("GET /%s shows a viewer action buttons", path)
			}
		}
		token := b.csrf()
		for _, action := range []string{"pause-queue", "retry", "cancel", "drain", "pause-schedule", "resume-schedule", "trigger-schedule", "retry-many"} {
			res, _ := b.do("POST", "action/"+action, url.Values{"target": {"billing"}, "id": {"x"}, "csrf": {token}})
			wantStatus(t, "viewer "+action, res, http.StatusForbidden)
		}
		if paused(t, a, "billing") {
			t.Fatal("a viewer paused the queue")
		}
		// Over RESP the same key reads and changes nothing.
		rc := a.Client(t, redisOptions(key))
		if err := rc.Do(ctx, "QUEUE.STATS", "billing").Err(); err != nil {
			t.Fatalf("a viewer cannot read: %v", err)
		}
		for _, cmd := range [][]any{{"QUEUE.PAUSE", "billing"}, {"JOB.SUBMIT", `{"queue":"billing"}`}, {"JOB.CANCEL", "x"}, {"WORKER.DRAIN", "w"}, {"KEY.CREATE", "admin", "me"}} {
			err := rc.Do(ctx, cmd...).Err()
			if err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
				t.Errorf("viewer %v: %v, want NOPERM", cmd, err)
			}
		}
	})

	t.Run("ARevokedKeysSessionEnds", func(t *testing.T) {
		key := a.CreateKey(t, "viewer", "leaver")
		b := newBrowser(t, base)
		b.signIn(key)
		res, _ := b.do("GET", "", nil)
		wantStatus(t, "before revocation", res, http.StatusOK)
		if err := admin.Do(ctx, "KEY.REVOKE", "leaver").Err(); err != nil {
			t.Fatal(err)
		}
		agqtest.Eventually(t, 15*time.Second, func() error {
			if res, _ := b.do("GET", "", nil); res.StatusCode != http.StatusSeeOther {
				return errString("still served after revocation")
			}
			return nil
		})
	})
}

type errString string

func (e errString) Error() string { return string(e) }

func TestTurnedOffAndUnderAPrefix(t *testing.T) {
	t.Parallel()
	off := agqtest.Start(t, func(c *config.Config) { c.UI = false })
	b := newBrowser(t, "http://"+off.HTTPAddr+"/")
	res, _ := b.do("GET", "login", nil)
	wantStatus(t, "login with the dashboard off", res, http.StatusNotFound)
	res, _ = b.do("GET", "healthz", nil)
	wantStatus(t, "healthz with the dashboard off", res, http.StatusOK)

	prefixed := agqtest.Start(t, func(c *config.Config) { c.UIPrefix = "/ops/agq/" })
	b = newBrowser(t, "http://"+prefixed.HTTPAddr+"/")
	res, _ = b.do("GET", "login", nil)
	wantStatus(t, "login outside the prefix", res, http.StatusNotFound)
	b = newBrowser(t, "http://"+prefixed.HTTPAddr+"/ops/agq/")
	res, _ = b.do("GET", "", nil)
	wantStatus(t, "overview under the prefix", res, http.StatusSeeOther)
	if loc := res.Header.Get("Location"); loc != "/ops/agq/login" {
		t.Fatalf("sends to %q", loc)
	}
	res = b.signIn(prefixed.AdminKey)
	wantStatus(t, "sign-in under the prefix", res, http.StatusSeeOther)
	if c := b.cookie(); c == nil {
		t.Fatal("no cookie under the prefix")
	}
	res, page := b.do("GET", "", nil)
	wantStatus(t, "overview under the prefix", res, http.StatusOK)
	if !strings.Contains(page, `href="/ops/agq/static/app.css"`) {
		t.Fatal("the page's links do not carry the prefix")
	}
	res, _ = b.do("GET", "static/app.js", nil)
	wantStatus(t, "script under the prefix", res, http.StatusOK)
}

// Every page names the dashboard's icon, and the path browsers ask when a
// page names none answers it too, rather than a 404 on every page.
func TestPagesHaveAnIcon(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{"/", "/ops/agq/"} {
		a := agqtest.Start(t, func(c *config.Config) { c.UIPrefix = prefix })
		b := newBrowser(t, "http://"+a.HTTPAddr+prefix)
		link := `<link rel="icon" href="` + prefix + `static/favicon.svg" type="image/svg+xml">`
		res, page := b.do("GET", "login", nil)
		wantStatus(t, "login", res, http.StatusOK)
		if !strings.Contains(page, link) {
			t.Fatalf("under %s the sign-in page names no icon:\n%s", prefix, page)
		}
		wantStatus(t, "sign-in", b.signIn(a.AdminKey), http.StatusSeeOther)
		for _, path := range []string{"", "workers", "failed", "schedules", "job?id=nope"} {
			if _, page := b.do("GET", path, nil); !strings.Contains(page, link) {
				t.Errorf("under %s page %q names no icon", prefix, path)
			}
		}
		for _, path := range []string{"static/favicon.svg", "favicon.ico"} {
			res, body := b.do("GET", path, nil)
			wantStatus(t, path, res, http.StatusOK)
			if ct := res.Header.Get("Content-Type"); ct != "image/svg+xml" || !strings.HasPrefix(body, "<svg") {
				t.Errorf("under %s %s: %s, %.40q", prefix, path, ct, body)
			}
		}
	}
}
