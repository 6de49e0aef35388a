package keyspace

import "sync"

// resumeMemo remembers the last job id read before each SCAN cursor this
// node handed out in the jobs region, so that the next page is read from
// that id on.
type resumeMemo struct {
	mu   sync.Mutex
	max  int
	last map[resumeKey]string
}

// resumeKey is a cursor position of a listing: the namespace, the prefix
// and the running filter make the listing what it is.
type resumeKey struct {
	namespace   string
	pos         int64
	prefix      string
	runningOnly bool
}

func newResumeMemo(size int) *resumeMemo {
	return &resumeMemo{max: size, last: map[resumeKey]string{}}
}

func (m *resumeMemo) get(k resumeKey) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last[k]
}

func (m *resumeMemo) put(k resumeKey, id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.last) >= m.max {
		for old := range m.last { // forget any one: a forgotten cursor still works
			delete(m.last, old)
			break
		}
	}
	m.last[k] = id
}
