package group

import (
	"fmt"
	"runtime/debug"
	"sync"
)

// Each calls f for 0 to n-1, at most parallel at once (the first in the
// calling goroutine), and returns when all have returned. A panic in any
// is raised again in the caller once all have returned, so that the
// Runner serving the group reports it as it reports its own.
func Each(n, parallel int, f func(i int)) {
	if n <= 1 || parallel <= 1 {
		for i := range n {
			f(i)
		}
		return
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		next     int
		panicked any
	)
	take := func() (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		if next >= n || panicked != nil {
			return 0, false
		}
		next++
		return next - 1, true
	}
	work := func() {
		defer func() {
			if p := recover(); p != nil {
				mu.Lock()
				if panicked == nil {
					panicked = fmt.Sprintf("%v\n%s", p, debug.Stack())
				}
				mu.Unlock()
			}
		}()
		for i, ok := take(); ok; i, ok = take() {
			f(i)
		}
	}
	for range min(parallel, n) - 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work()
		}()
	}
	work()
	wg.Wait()
	if panicked != nil {
		panic(panicked)
	}
}
