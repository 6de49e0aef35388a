package keyspace

// Glob is a Redis glob pattern (KEYS, SCAN MATCH, PSUBSCRIBE) compiled to
// tokens. It follows Redis's stringmatchlen byte for byte: '*' matches any
// run of bytes, '?' one byte, '[…]' one byte of a class ('^' first negates,
// 'a-z' is a range, '\' escapes, an unclosed class ends with the pattern),
// and '\x' the byte x. github.com/tidwall/match was the obvious library,
// but it knows no classes and matches runes, so 'job:[ab]*' would not mean
// what it means to Redis.
type Glob struct {
	tokens []globToken
	// prefix and suffix are the literal text every match starts and ends
	// with.
	prefix, suffix string
}

// globToken is a '*' or a set of bytes that matches one byte.
type globToken struct {
	star bool
	set  byteSet
	// literal is set when the token is one plain or escaped byte.
	literal bool
	b       byte
}

// byteSet is a set of bytes.
type byteSet [4]uint64

func (b *byteSet) add(c byte)      { b[c>>6] |= 1 << (c & 63) }
func (b *byteSet) has(c byte) bool { return b[c>>6]&(1<<(c&63)) != 0 }

func (b *byteSet) intersects(o *byteSet) bool {
	return b[0]&o[0] != 0 || b[1]&o[1] != 0 || b[2]&o[2] != 0 || b[3]&o[3] != 0
}

func allBytesBut(except ...byte) byteSet {
	b := byteSet{^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)}
	for _, c := range except {
		b[c>>6] &^= 1 << (c & 63)
	}
	return b
}

// CompileGlob compiles a pattern; every pattern compiles, as in Redis.
func CompileGlob(p string) *Glob {
	g := &Glob{}
	literal := true // still reading the literal prefix
	var prefix []byte
	for i := 0; i < len(p); {
		var t globToken
		switch c := p[i]; c {
		case '*':
			i++
			literal = false
			if n := len(g.tokens); n > 0 && g.tokens[n-1].star {
				continue
			}
			t.star = true
		case '?':
			i++
			literal = false
			t.set = allBytesBut()
		case '[':
			i++
			literal = false
			t.set, i = compileClass(p, i)
		default:
			if c == '\\' && i+1 < len(p) {
				i++
				c = p[i]
			}
			i++
			t.set.add(c)
			t.literal, t.b = true, c
			if literal {
				prefix = append(prefix, c)
			}
		}
		g.tokens = append(g.tokens, t)
	}
	g.prefix = string(prefix)
	k := len(g.tokens)
	for k > 0 && g.tokens[k-1].literal {
		k--
	}
	suffix := make([]byte, 0, len(g.tokens)-k)
	for _, t := range g.tokens[k:] {
		suffix = append(suffix, t.b)
	}
	g.suffix = string(suffix)
	return g
}

// compileClass reads a class whose '[' is just before p[i] and returns its
// set and the index after it.
func compileClass(p string, i int) (byteSet, int) {
	var set byteSet
	negate := i < len(p) && p[i] == '^'
	if negate {
		i++
	}
	for i < len(p) {
		switch {
		case p[i] == '\\' && i+1 < len(p):
			set.add(p[i+1])
			i += 2
		case p[i] == ']':
			i++
			return finishClass(set, negate), i
		case i+2 < len(p) && p[i+1] == '-':
			lo, hi := p[i], p[i+2]
			if lo > hi {
				lo, hi = hi, lo
			}
			for c := int(lo); c <= int(hi); c++ {
				set.add(byte(c))
			}
			i += 3
		default:
			set.add(p[i])
			i++
		}
	}
	return finishClass(set, negate), i
}

func finishClass(set byteSet, negate bool) byteSet {
	if negate {
		for k := range set {
			set[k] = ^set[k]
		}
	}
	return set
}

// Match reports whether s matches. Every token but '*' matches exactly one
// byte, so backtracking to the last '*' is enough: O(len(s)·len(tokens)).
func (g *Glob) Match(s string) bool {
	if s == "" {
		return len(g.tokens) == 0 // even "*": Redis's quirk, kept
	}
	ti, si := 0, 0
	starT, starS := -1, 0
	for si < len(s) {
		switch {
		case ti < len(g.tokens) && g.tokens[ti].star:
			starT, starS = ti, si
			ti++
		case ti < len(g.tokens) && g.tokens[ti].set.has(s[si]):
			ti++
			si++
		case starT >= 0:
			starS++
			ti, si = starT+1, starS
		default:
			return false
		}
	}
	for ti < len(g.tokens) && g.tokens[ti].star {
		ti++
	}
	return ti == len(g.tokens)
}

// canMatchShape reports whether some key head+name+tail, name being one or
// more bytes of nameBytes, matches. KEYS and SCAN use it to leave alone the
// tables whose keys cannot match: "worker:*:alive" cannot match a job:…
// key, "job:*:worker" no job:<id> key (ids hold no ':').
//
// It runs the pattern over the shape as over a string whose middle is a
// wildcard: positions are the head's bytes, the name (not entered yet, or
// at least one byte in), the tail's bytes and the end, at most 64 of them,
// held in a bit mask of the positions reachable after each token.
func (g *Glob) canMatchShape(head, tail string, nameBytes *byteSet) bool {
	hole := len(head)  // in the name, nothing consumed yet
	inName := hole + 1 // in the name, one byte or more consumed
	end := hole + 2 + len(tail)
	if end >= 64 {
		return true // no shape is this long; be safe
	}
	// leaveName adds the first tail position to masks that are in the name.
	leaveName := func(m uint64) uint64 {
		if m&(1<<inName) != 0 {
			m |= 1 << (inName + 1)
		}
		return m
	}
	// byteAt is the byte a fixed position holds.
	byteAt := func(pos int) byte {
		if pos < hole {
			return head[pos]
		}
		return tail[pos-inName-1]
	}
	reach := uint64(1) // at the start of the head
	for _, t := range g.tokens {
		if t.star {
			// Any run of bytes: every position from the first reachable on.
			first := 0
			for reach&(1<<first) == 0 {
				first++
			}
			reach = leaveName(^uint64(0) << first & (1<<(end+1) - 1))
			continue
		}
		next := uint64(0)
		for pos := 0; pos < end; pos++ {
			if reach&(1<<pos) == 0 {
				continue
			}
			switch {
			case pos == hole || pos == inName:
				if t.set.intersects(nameBytes) {
					next |= 1 << inName
				}
			case t.set.has(byteAt(pos)):
				next |= 1 << (pos + 1)
			}
		}
		reach = leaveName(next)
		if reach == 0 {
			return false
		}
	}
	return reach&(1<<end) != 0
}
