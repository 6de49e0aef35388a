package dashboard

import (
	"net/http"
	"sync"
	"time"

	"github.com/agq/agq/records"
)

// nsCookie remembers the namespace a cluster key's sign-in looks at. It
// grants nothing: a key of one namespace sees its own whatever it says.
const nsCookie = "agq_namespace"

// view is what the dashboard keeps of one namespace for a couple of
// seconds, however many pages look at it.
type view struct {
	overview  cached[overviewData]
	summaries cached[[]records.QueueSummary]
	chart     chartCache
}

// invalidate makes the next pages load afresh (after an action).
func (v *view) invalidate() {
	v.overview.invalidate()
	v.summaries.invalidate()
}

// views holds a view per namespace looked at.
type views struct {
	mu     sync.Mutex
	byName map[string]*view
}

func (vs *views) of(ns string) *view {
	vs.mu.Lock()
	defer vs.mu.Unlock()
	v, ok := vs.byName[ns]
	if !ok {
		v = &view{
			overview:  cached[overviewData]{ttl: 2 * time.Second},
			summaries: cached[[]records.QueueSummary]{ttl: 2 * time.Second},
		}
		vs.byName[ns] = v
	}
	return v
}

// enter sets the namespace the request looks at: the key's own, or for a
// key of every namespace the one picked (default until one is).
func (d *Dashboard) enter(r *http.Request, sess *session) error {
	sess.view = sess.Namespace
	if sess.view == "" {
		sess.view = records.DefaultNamespace
		if c, err := r.Cookie(nsCookie); err == nil && c.Value != "" {
			ok, err := d.eng.NamespaceExists(r.Context(), c.Value)
			if err != nil {
				return err
			}
			if ok {
				sess.view = c.Value
			}
		}
	}
	sess.eng = d.eng.In(sess.view)
	return nil
}

// pickNamespace moves a cluster key's dashboard to another namespace.
func (d *Dashboard) pickNamespace(w http.ResponseWriter, r *http.Request, sess session) {
	name := r.URL.Query().Get("name")
	if sess.Namespace != "" {
		http.Error(w, "this key belongs to namespace "+sess.Namespace, http.StatusForbidden)
		return
	}
	ok, err := d.eng.NamespaceExists(r.Context(), name)
	if err != nil {
		d.fail(w, "namespace", err)
		return
	}
	if !ok {
		d.back(w, r, "", "No such namespace "+name+".")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: nsCookie, Value: name, Path: d.prefix, HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, d.prefix, http.StatusSeeOther)
}

// namespaceChoices are the namespaces a cluster key may pick; nil for a
// key of one namespace.
func (d *Dashboard) namespaceChoices(r *http.Request, sess *session) []string {
	if sess.Namespace != "" {
		return nil
	}
	all, err := d.eng.Namespaces(r.Context())
	if err != nil {
		return []string{sess.view}
	}
	names := make([]string, len(all))
	for i, n := range all {
		names[i] = n.Name
	}
	return names
}
