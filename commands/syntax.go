package commands

import (
	"fmt"
	"strings"

	"github.com/agq/agq/resp"
)

// docArg is one argument of a command as Redis 7's COMMAND DOCS describes
// it, which redis-cli turns into HELP text, hints and completion.
type docArg struct {
	Name     string
	Type     string // string, integer, double, key, pattern, pure-token, oneof, block
	Token    string // the word before the value, or the pure token
	Optional bool
	Multiple bool
	Args     []docArg // of a oneof or a block
}

// parseSyntax reads a command's syntax as docs/protocol headings write it,
// after the name: words (an all-capital word is a token, bound to the
// word after it unless that is another token or a group), [optional
// groups], (required | groups) of alternatives, a | b alternatives, and
// "…" repeating what comes before.
func parseSyntax(s string) ([]docArg, error) {
	p := &syntaxParser{words: splitSyntax(s)}
	args, err := p.sequence()
	if err != nil {
		return nil, err
	}
	if p.i < len(p.words) {
		return nil, fmt.Errorf("syntax %q: unexpected %q", s, p.words[p.i])
	}
	return args, nil
}

func splitSyntax(s string) []string {
	for _, sep := range []string{"[", "]", "(", ")", "|", "…"} {
		s = strings.ReplaceAll(s, sep, " "+sep+" ")
	}
	return strings.Fields(s)
}

type syntaxParser struct {
	words []string
	i     int
}

func (p *syntaxParser) peek() string {
	if p.i < len(p.words) {
		return p.words[p.i]
	}
	return ""
}

// sequence reads elements up to "]", ")", "|" or the end.
func (p *syntaxParser) sequence() ([]docArg, error) {
	var args []docArg
	for {
		switch w := p.peek(); w {
		case "", "]", ")", "|":
			return args, nil
		case "(":
			p.i++
			alts, err := p.alternatives()
			if err != nil {
				return nil, err
			}
			if p.peek() != ")" {
				return nil, fmt.Errorf("unclosed (")
			}
			p.i++
			args = append(args, bracketArg(alts))
		case "…":
			if len(args) == 0 {
				return nil, fmt.Errorf("… repeats nothing")
			}
			p.i++
			args[len(args)-1].Multiple = true
		case "[":
			p.i++
			alts, err := p.alternatives()
			if err != nil {
				return nil, err
			}
			if p.peek() != "]" {
				return nil, fmt.Errorf("unclosed [")
			}
			p.i++
			g := bracketArg(alts)
			g.Optional = true
			// "x [x …]" is one argument that repeats.
			if n := len(args); n > 0 && g.Multiple && len(g.Args) == 0 && args[n-1].Name == g.Name && args[n-1].Token == g.Token {
				args[n-1].Multiple = true
				continue
			}
			args = append(args, g)
		default:
			p.i++
			if isToken(w) {
				next := p.peek()
				if next != "" && !isToken(next) && !strings.Contains("[]()|…", next) {
					p.i++
					a := plainArg(next)
					a.Token = w
					args = append(args, a)
					continue
				}
				args = append(args, docArg{Name: strings.ToLower(w), Type: "pure-token", Token: w})
				continue
			}
			args = append(args, plainArg(w))
		}
	}
}

// alternatives reads sequences separated by "|".
func (p *syntaxParser) alternatives() ([][]docArg, error) {
	var alts [][]docArg
	for {
		seq, err := p.sequence()
		if err != nil {
			return nil, err
		}
		if len(seq) == 0 {
			return nil, fmt.Errorf("empty alternative")
		}
		alts = append(alts, seq)
		if p.peek() != "|" {
			return alts, nil
		}
		p.i++
	}
}

// bracketArg is the one argument a bracket holds: itself, a block of several,
// or a oneof of the alternatives.
func bracketArg(alts [][]docArg) docArg {
	one := func(seq []docArg) docArg {
		if len(seq) == 1 {
			return seq[0]
		}
		names := make([]string, len(seq))
		for i, a := range seq {
			names[i] = a.Name
		}
		return docArg{Name: strings.Join(names, "-"), Type: "block", Args: seq}
	}
	if len(alts) == 1 {
		return one(alts[0])
	}
	g := docArg{Type: "oneof"}
	names := make([]string, len(alts))
	for i, alt := range alts {
		g.Args = append(g.Args, one(alt))
		names[i] = g.Args[i].Name
	}
	g.Name = strings.Join(names, "-")
	return g
}

func isToken(w string) bool {
	return strings.ToUpper(w) == w && strings.ContainsAny(w, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") && !strings.ContainsAny(w, "<:")
}

// plainArg types an argument by its name.
func plainArg(name string) docArg {
	typ := "string"
	switch {
	case name == "key" || strings.HasPrefix(name, "queue:"):
		typ = "key"
	case name == "pattern":
		typ = "pattern"
	case name == "timeout":
		typ = "double"
	case name == "count" || name == "index" || name == "start" || name == "stop" || name == "protover" || name == "cursor" || name == "n":
		typ = "integer"
	}
	return docArg{Name: name, Type: typ}
}

// reply is the argument as COMMAND DOCS shows it.
func (a docArg) reply() resp.Reply {
	m := resp.Map{
		{Key: "name", Value: resp.BulkString(a.Name)},
		{Key: "type", Value: resp.BulkString(a.Type)},
	}
	if a.Token != "" {
		m = append(m, resp.KV{Key: "token", Value: resp.BulkString(a.Token)})
	}
	var flags resp.Array
	if a.Optional {
		flags = append(flags, resp.SimpleString("optional"))
	}
	if a.Multiple {
		flags = append(flags, resp.SimpleString("multiple"))
	}
	if flags != nil {
		m = append(m, resp.KV{Key: "flags", Value: flags})
	}
	if len(a.Args) > 0 {
		sub := make(resp.Array, len(a.Args))
		for i, s := range a.Args {
			sub[i] = s.reply()
		}
		m = append(m, resp.KV{Key: "arguments", Value: sub})
	}
	return m
}
