package dashboard

import (
	"context"
	"fmt"
	"html/template"
	"strings"
	"sync"
	"time"

	"github.com/agq/agq/engine/api"
	"github.com/agq/agq/records"
)

// chartMinutes is the chart's span: the last hour, minute by minute.
const chartMinutes = 60

// chartCache keeps the per-minute counts of minutes that are over. The
// counts come from the database (jobs_finished), not from this process, so
// that every node shows the cluster's work; minutes that are over do not
// change, so a refresh asks only for the last few. (A job's finished_at is
// its transaction's start, so the minute before the current one is asked
// again too: a long transaction may commit into it late.)
type chartCache struct {
	mu      sync.Mutex
	minutes map[int64]records.MinuteCount // by Unix minute
	recent  cached[[]records.MinuteCount]
}

func (c *chartCache) get(ctx context.Context, st api.Engine) ([]records.MinuteCount, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.minutes == nil {
		c.minutes = map[int64]records.MinuteCount{}
		c.recent.ttl = 5 * time.Second
	}
	return c.recent.get(func() ([]records.MinuteCount, error) {
		now := time.Now().Truncate(time.Minute)
		first := now.Add(-(chartMinutes - 1) * time.Minute)
		since := first
		for m := first; m.Before(now.Add(-time.Minute)); m = m.Add(time.Minute) {
			if _, ok := c.minutes[m.Unix()/60]; !ok {
				break
			}
			since = m.Add(time.Minute)
		}
		fresh, err := st.FinishedPerMinute(ctx, since, countCap)
		if err != nil {
			return nil, err
		}
		for i, m := range fresh {
			if i < len(fresh)-2 {
				c.minutes[m.Minute.Unix()/60] = m
			}
		}
		byMinute := map[int64]records.MinuteCount{}
		for k, m := range c.minutes {
			if k < first.Unix()/60 {
				delete(c.minutes, k)
				continue
			}
			byMinute[k] = m
		}
		for _, m := range fresh {
			byMinute[m.Minute.Unix()/60] = m
		}
		out := make([]records.MinuteCount, chartMinutes)
		for i := range out {
			m := first.Add(time.Duration(i) * time.Minute)
			out[i] = byMinute[m.Unix()/60]
			out[i].Minute = m
		}
		return out, nil
	})
}

// chartSVG draws the minutes as bars, completed (green) under failed
// (red), on the server: no script and no chart library. Only numbers go
// into the markup.
func chartSVG(minutes []records.MinuteCount) template.HTML {
	const w, h, top = 600, 120, 14
	peak := int64(1)
	for _, m := range minutes {
		peak = max(peak, m.Completed+m.Failed)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="jobs finished per minute, last hour">`, w, h+16)
	fmt.Fprintf(&b, `<line x1="0" y1="%d" x2="%d" y2="%d" stroke="#c8ccd2" stroke-width="1"/>`, h, w, h)
	fmt.Fprintf(&b, `<text x="0" y="10" font-size="10" fill="#5b6470">%s/min</text>`, formatInt(peak))
	bw := float64(w) / float64(len(minutes))
	for i, m := range minutes {
		x := float64(i) * bw
		ch := float64(h-top) * float64(m.Completed) / float64(peak)
		fh := float64(h-top) * float64(m.Failed) / float64(peak)
		title := fmt.Sprintf("%s: %d completed, %d failed", m.Minute.UTC().Format("15:04"), m.Completed, m.Failed)
		fmt.Fprintf(&b, `<g><title>%s</title>`, template.HTMLEscapeString(title))
		fmt.Fprintf(&b, `<rect x="%.1f" y="0" width="%.1f" height="%d" fill="transparent"/>`, x, bw, h)
		if ch > 0 {
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#2f9e44"/>`, x+1, float64(h)-ch, bw-2, ch)
		}
		if fh > 0 {
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#e03131"/>`, x+1, float64(h)-ch-fh, bw-2, fh)
		}
		b.WriteString(`</g>`)
	}
	fmt.Fprintf(&b, `<text x="0" y="%d" font-size="10" fill="#5b6470">-60 min</text>`, h+13)
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10" fill="#5b6470" text-anchor="end">now</text>`, w, h+13)
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}
