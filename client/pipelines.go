package client

import "sync"

// pipelines is how many pipelines of a kind (reports, step calls) may be
// in flight at once: agq runs two groups of a kind at a time, and two
// more pipelines wait behind them, gathered while those commit.
const pipelines = 4

// batchQueue holds what waits for a pipeline: reports, step calls.
type batchQueue[T any] struct {
	// max bounds what one pipeline carries: as many as agq puts in one
	// group (the server's MaxGroup), so that each pipeline is one commit.
	max     int
	mu      sync.Mutex
	waiting []T
	closed  bool
	wake    chan struct{} // capacity 1
}

func newBatchQueue[T any](max int) batchQueue[T] {
	return batchQueue[T]{max: max, wake: make(chan struct{}, 1)}
}

// push queues p; once the queue is closed, it goes only if take has not
// returned its last batch yet.
func (q *batchQueue[T]) push(p T) {
	q.mu.Lock()
	q.waiting = append(q.waiting, p)
	q.mu.Unlock()
	q.signal()
}

// offer queues p unless the queue is closed, and reports whether it did.
func (q *batchQueue[T]) offer(p T) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	q.waiting = append(q.waiting, p)
	q.mu.Unlock()
	q.signal()
	return true
}

// take waits for entries and returns up to max of them, once at least
// enough() wait or the queue is closed; none once it is closed and empty.
func (q *batchQueue[T]) take(enough func() int) []T {
	for {
		q.mu.Lock()
		n := len(q.waiting)
		if n > 0 && (n >= enough() || q.closed) {
			k := min(n, q.max)
			batch := q.waiting[:k:k]
			q.waiting = q.waiting[k:]
			if len(q.waiting) == 0 {
				q.waiting = nil
			}
			q.mu.Unlock()
			return batch
		}
		closed := q.closed
		q.mu.Unlock()
		if closed {
			return nil
		}
		<-q.wake
	}
}

// signal wakes take to look again.
func (q *batchQueue[T]) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *batchQueue[T]) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.signal()
}

// sendPipelines sends what q gathers as pipelines (send), until q is
// closed and empty. With no pipeline in flight, whatever waits goes at
// once; while some are, another goes only with a full batch, and the rest
// gathers until one returns.
func sendPipelines[T any](q *batchQueue[T], send func([]T)) {
	inFlight := make(chan struct{}, pipelines)
	enough := func() int {
		if len(inFlight) > 1 { // this pipeline's own token counts
			return q.max
		}
		return 1
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		inFlight <- struct{}{}
		batch := q.take(enough)
		if batch == nil {
			return
		}
		wg.Go(func() {
			send(batch)
			<-inFlight
			q.signal()
		})
	}
}
