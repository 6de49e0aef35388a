package dashboard

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/agq/agq/engine/api"
	"github.com/agq/agq/internal/auth"
)

// cookieName is the session cookie's name.
const cookieName = "agq_session"

// session is what the signed cookie says: who signed in, with which key
// (its SHA-256 digest, never the key), until when.
type session struct {
	Principal string `json:"p"`
	Role      string `json:"r"`
	Digest    string `json:"d"`
	Expires   int64  `json:"e"`
	// Nonce makes each sign-in's cookie, and so its CSRF token, unique.
	Nonce string `json:"n"`
	// Namespace is the key's namespace, "" for a key of every namespace
	// (which picks the one it looks at).
	Namespace string `json:"ns,omitempty"`

	payload string // the signed part, as sent
	// view is the namespace the request looks at, and eng the engine
	// acting there: set for each request by withSession.
	view string
	eng  api.Engine
}

// canAct reports whether the session may change anything.
func (s *session) canAct() bool { return s.Role == auth.RoleAdmin }

// Errors of sessions.
var (
	errNoSession  = errors.New("no session")
	errBadSession = errors.New("session cookie is forged, expired or for a revoked key")
)

// signer signs and checks session cookies and CSRF tokens with the secret
// every node shares.
type signer struct {
	secret []byte
}

func (s signer) mac(parts ...string) []byte {
	m := hmac.New(sha256.New, s.secret)
	for _, p := range parts {
		m.Write([]byte(p))
		m.Write([]byte{0})
	}
	return m.Sum(nil)
}

// encode returns the cookie value: payload "." signature, both base64url.
func (s signer) encode(sess session) string {
	raw, _ := json.Marshal(sess)
	payload := base64.RawURLEncoding.EncodeToString(raw)
	return payload + "." + base64.RawURLEncoding.EncodeToString(s.mac("session", payload))
}

// decode checks the signature and expiry of a cookie value.
func (s signer) decode(value string, now time.Time) (session, error) {
	payload, sig, ok := strings.Cut(value, ".")
	if !ok {
		return session{}, errBadSession
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, s.mac("session", payload)) {
		return session{}, errBadSession
	}
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return session{}, errBadSession
	}
	var sess session
	if err := json.Unmarshal(raw, &sess); err != nil || now.Unix() >= sess.Expires {
		return session{}, errBadSession
	}
	sess.payload = payload
	return sess, nil
}

// csrfToken is the session's token for forms: derived from the signed
// payload, so it needs no server state and changes with every sign-in.
func (s signer) csrfToken(sess session) string {
	return base64.RawURLEncoding.EncodeToString(s.mac("csrf", sess.payload))
}

func (s signer) csrfValid(sess session, token string) bool {
	want := s.csrfToken(sess)
	return token != "" && subtle.ConstantTimeCompare([]byte(token), []byte(want)) == 1
}

// keyCheck remembers when each key was last found still valid, so that a
// revoked key's sessions end within recheckEvery without a database read on
// every request.
type keyCheck struct {
	keys auth.Keys
	mu   sync.Mutex
	seen map[string]time.Time // digest → last found valid
}

// recheckEvery bounds how long a revoked key's session may still be used.
const recheckEvery = 5 * time.Second

func (k *keyCheck) valid(ctx context.Context, sess session, now time.Time) (bool, error) {
	k.mu.Lock()
	last, ok := k.seen[sess.Digest]
	k.mu.Unlock()
	if ok && now.Sub(last) < recheckEvery {
		return true, nil
	}
	raw, err := hex.DecodeString(sess.Digest)
	if err != nil || len(raw) != 32 {
		return false, nil
	}
	p := auth.Principal{Name: sess.Principal, Role: sess.Role}
	copy(p.Digest[:], raw)
	live, err := k.keys.StillValid(ctx, p)
	if err != nil || !live {
		k.mu.Lock()
		delete(k.seen, sess.Digest)
		k.mu.Unlock()
		return false, err
	}
	k.mu.Lock()
	// Forget stale entries now and then; the map holds one per live session key.
	if len(k.seen) > 1000 {
		for d, t := range k.seen {
			if now.Sub(t) >= recheckEvery {
				delete(k.seen, d)
			}
		}
	}
	k.seen[sess.Digest] = now
	k.mu.Unlock()
	return true, nil
}

// sessionOf returns the request's valid session.
func (d *Dashboard) sessionOf(r *http.Request) (session, error) {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return session{}, errNoSession
	}
	now := time.Now()
	sess, err := d.signer.decode(c.Value, now)
	if err != nil {
		return session{}, err
	}
	ok, err := d.keyCheck.valid(r.Context(), sess, now)
	if err != nil {
		return session{}, err
	}
	if !ok {
		return session{}, errBadSession
	}
	return sess, nil
}

// setCookie sends the session cookie: HttpOnly (no script reads it),
// SameSite=Strict (no other site's page sends it), Secure behind TLS.
func (d *Dashboard) setCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name:     cookieName,
		Value:    value,
		Path:     d.prefix,
		MaxAge:   maxAge,
		HttpOnly: true,
		SameSite: http.SameSiteStrictMode,
		Secure:   r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https",
	})
}
