package resp

import "sync/atomic"

// Budget bounds the bytes that all connections together may hold for the
// commands they send. A command's first MiB is free; beyond it, each bulk a
// command declares is reserved from the budget before its body is read —
// twice its size, since the RESP reader grows its buffer by doubling — and
// the connection keeps its largest reservation until it closes, since the
// reader never shrinks that buffer either. A client whose command finds
// the budget spent gets an error and is disconnected; the others go on
// being served.
type Budget struct {
	left atomic.Int64
}

// budgetFree is what any command may hold without the budget.
const budgetFree = 1 << 20

// NewBudget returns a budget of n bytes.
func NewBudget(n int64) *Budget {
	b := &Budget{}
	b.left.Store(n)
	return b
}

func (b *Budget) take(n int64) bool {
	if b.left.Add(-n) < 0 {
		b.left.Add(n)
		return false
	}
	return true
}

func (b *Budget) give(n int64) { b.left.Add(n) }

// reserve makes the frame's reservation cover a command of size bytes.
func (f *guardFrame) reserve(size int64) bool {
	need := 2*(size-budgetFree) - f.reserved
	if f.lim.Budget == nil || need <= 0 {
		return true
	}
	if !f.lim.Budget.take(need) {
		return false
	}
	f.reserved += need
	return true
}

// release gives the frame's reservation back: its connection closed.
func (f *guardFrame) release() {
	if f.reserved > 0 {
		f.lim.Budget.give(f.reserved)
		f.reserved = 0
	}
}
