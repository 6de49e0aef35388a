package commands

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every registered command has docs, and its usage line is the heading of
// its section on the docs/protocol page of its group, word for word: the
// pages and COMMAND DOCS say the same.
func TestEveryCommandIsDocumentedAsTheTableSays(t *testing.T) {
	table := (&Server{}).buildTable()
	pages := map[string]string{}
	for name, c := range table {
		if c.doc.summary == "" || c.doc.group == "" {
			t.Errorf("%s: no summary or group", name)
			continue
		}
		if c.doc.refused {
			continue // one section for them all
		}
		page, ok := pages[c.doc.group]
		if !ok {
			b, err := os.ReadFile(filepath.Join("..", "docs", "protocol", c.doc.group+".md"))
			if err != nil {
				t.Fatalf("%s: group %s has no page: %v", name, c.doc.group, err)
			}
			page = string(b)
			pages[c.doc.group] = page
		}
		if heading := "\n## " + c.Syntax() + "\n"; !strings.Contains(page, heading) {
			t.Errorf("docs/protocol/%s.md has no heading %q", c.doc.group, strings.TrimSpace(heading))
		}
	}
	for name := range commandDocs {
		if table[name] == nil {
			t.Errorf("docs for %s, which is not registered", name)
		}
	}
}

// The syntax notation becomes Redis 7's argument trees.
func TestSyntaxBecomesCommandDocsArguments(t *testing.T) {
	for _, tc := range []struct{ syntax, want string }{
		{"queue:<name> json [json …]", "queue:<name>:key json:string+multiple"},
		{"queue:<name> [queue:<name> …] timeout", "queue:<name>:key+multiple timeout:double"},
		{"cursor [MATCH pattern] [COUNT count]", "cursor:integer MATCH/pattern:pattern+optional COUNT/count:integer+optional"},
		{"[ACTIVE|DRAINING]", "active-draining:oneof+optional(ACTIVE/active:pure-token DRAINING/draining:pure-token)"},
		{"[protover [AUTH principal key]]", "protover-principal-key:block+optional(protover:integer principal-key:block+optional(AUTH/principal:string key:key))"},
		{"[COUNT | INFO name …]", "count-name:oneof+optional(COUNT/count:pure-token INFO/name:string+multiple)"},
		{"(SIGNAL name | JOBS id [id …])", "name-id-id:oneof(SIGNAL/name:string id-id:block(JOBS/id:string id:string+multiple+optional))"},
	} {
		args, err := parseSyntax(tc.syntax)
		if err != nil {
			t.Fatalf("%q: %v", tc.syntax, err)
		}
		if got := describeArgs(args); got != tc.want {
			t.Errorf("%q:\n got %s\nwant %s", tc.syntax, got, tc.want)
		}
	}
	for _, bad := range []string{"[a", "a ]", "… a", "[ | a]"} {
		if _, err := parseSyntax(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func describeArgs(args []docArg) string {
	parts := make([]string, len(args))
	for i, a := range args {
		s := a.Name + ":" + a.Type
		if a.Token != "" {
			s = a.Token + "/" + s
		}
		if a.Multiple {
			s += "+multiple"
		}
		if a.Optional {
			s += "+optional"
		}
		if len(a.Args) > 0 {
			s += "(" + describeArgs(a.Args) + ")"
		}
		parts[i] = s
	}
	return strings.Join(parts, " ")
}
