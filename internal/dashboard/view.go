package dashboard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// pageData is what every page's template gets.
type pageData struct {
	Title   string
	Nav     string // the current section, for the menu
	Prefix  string
	Here    string // this page's path and query, where actions come back to
	CSRF    string
	User    string
	CanAct  bool
	Notice  string // the outcome of the last action
	Error   string
	Refresh int // seconds between live refreshes; 0: none
	// Namespace is the one the page shows; Namespaces those a key of
	// every namespace may pick (none for a key of one).
	Namespace  string
	Namespaces []string
	Data       any
}

var pageNames = []string{"login", "overview", "queue", "job", "failed", "workers", "schedules", "confirm", "notfound"}

// parsePages parses each page with the layout into its own set, so that
// each can define "content" without clashing.
func parsePages(funcs template.FuncMap) (map[string]*template.Template, error) {
	out := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("parsing page %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

// render writes a page; it is rendered into memory first so that a
// template error becomes a 500 rather than half a page.
func (d *Dashboard) render(w http.ResponseWriter, r *http.Request, status int, name string, sess *session, pd pageData) {
	pd.Prefix = d.prefix
	here := r.URL.Query()
	here.Del("notice")
	here.Del("error")
	pd.Here = r.URL.Path
	if len(here) > 0 {
		pd.Here += "?" + here.Encode()
	}
	pd.Notice = r.URL.Query().Get("notice")
	if pd.Error == "" {
		pd.Error = r.URL.Query().Get("error")
	}
	if sess != nil {
		pd.User = sess.Principal + " (" + sess.Role + ")"
		pd.CanAct = sess.canAct()
		pd.CSRF = d.signer.csrfToken(*sess)
		pd.Namespace = sess.view
		pd.Namespaces = d.namespaceChoices(r, sess)
	}
	var b bytes.Buffer
	if err := d.pages[name].Execute(&b, pd); err != nil {
		d.log.Error().Err(err).Str("page", name).Msg("dashboard: rendering failed")
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// fail answers a page whose data could not be read.
func (d *Dashboard) fail(w http.ResponseWriter, page string, err error) {
	d.log.Warn().Err(err).Str("page", page).Msg("dashboard: reading the page's data failed")
	http.Error(w, "database unavailable, retry later", http.StatusServiceUnavailable)
}

func (d *Dashboard) funcs() template.FuncMap {
	return template.FuncMap{
		"count": func(n int64) string {
			if n >= countCap {
				return formatInt(countCap) + "+"
			}
			return formatInt(n)
		},
		"ts": func(t any) string {
			switch v := t.(type) {
			case time.Time:
				return v.UTC().Format("2006-01-02 15:04:05Z")
			case *time.Time:
				if v == nil {
					return "—"
				}
				return v.UTC().Format("2006-01-02 15:04:05Z")
			}
			return ""
		},
		"ago": func(t any) string {
			var at time.Time
			switch v := t.(type) {
			case time.Time:
				at = v
			case *time.Time:
				if v == nil {
					return ""
				}
				at = *v
			}
			return age(time.Since(at))
		},
		"json":      prettyJSON,
		"progress":  progress,
		"lastError": lastError,
		"act": func(p pageData, name, target, label, class string) actionButton {
			return actionButton{P: p, Name: name, Target: target, Label: label, Class: class}
		},
		"query": func(kv ...string) string { return query(kv...) },
		"deref": func(s *string) string {
			if s == nil {
				return ""
			}
			return *s
		},
	}
}

// actionButton is a one-button form posting an action with the CSRF token.
type actionButton struct {
	P                          pageData
	Name, Target, Label, Class string
}

// progress words a job's progress report: "40% (task 2)".
func progress(raw json.RawMessage) string {
	var p struct {
		Task    *int     `json:"current_task"`
		Percent *float64 `json:"progress_percent"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &p) != nil {
		return ""
	}
	out := ""
	if p.Percent != nil {
		out = strconv.FormatFloat(*p.Percent, 'f', -1, 64) + "%"
	}
	if p.Task != nil {
		out += fmt.Sprintf(" (task %d)", *p.Task)
	}
	return out
}

// lastError is the newest entry of a job's error history, cut short.
func lastError(raw json.RawMessage) string {
	var errs []struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(raw, &errs) != nil || len(errs) == 0 {
		return ""
	}
	e := errs[len(errs)-1].Error
	if len(e) > 200 {
		e = e[:200] + "…"
	}
	return e
}

// countCap is where the dashboard's counts stop (shown as "10,000+"):
// counting further would read every row of a large set on each refresh.
const countCap = 10000

func formatInt(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// age words a duration the way people glance at it: 4s, 3m, 2h, 5d.
func age(d time.Duration) string {
	switch {
	case d < 0:
		return "in " + age(-d)
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

// prettyJSON indents a stored JSON value for a <pre>; "" when absent.
func prettyJSON(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return string(raw)
	}
	return b.String()
}

// query builds "?k=v&…" from pairs, skipping empty values.
func query(kv ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			v.Set(kv[i], kv[i+1])
		}
	}
	if len(v) == 0 {
		return ""
	}
	return "?" + v.Encode()
}

// cached holds one value for a short time, so that many open pages
// polling together cost the database what one does.
type cached[T any] struct {
	ttl time.Duration
	mu  sync.Mutex
	at  time.Time
	val T
}

func (c *cached[T]) get(load func() (T, error)) (T, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < c.ttl {
		return c.val, nil
	}
	v, err := load()
	if err != nil {
		return v, err
	}
	c.val, c.at = v, time.Now()
	return v, nil
}

// invalidate makes the next get load afresh (after an action).
func (c *cached[T]) invalidate() {
	c.mu.Lock()
	c.at = time.Time{}
	c.mu.Unlock()
}
