package resp

import "testing"

// Keywords compare in ASCII only, as Redis compares them.
func TestKeywordsFoldASCIIOnly(t *testing.T) {
	cases := []struct {
		arg, keyword string
		is           bool
	}{
		{"count", "COUNT", true},
		{"CoUnT", "count", true},
		{"COUNT", "COUNT", true},
		{"coun", "COUNT", false},
		{"ſtatus", "STATUS", false}, // strings.EqualFold would say yes
		{"K", "k", true},
		{"k\x00", "k", false},
		{"", "", true},
	}
	for _, c := range cases {
		if got := Is([]byte(c.arg), c.keyword); got != c.is {
			t.Errorf("Is(%q, %q) = %v", c.arg, c.keyword, got)
		}
	}
	if got := Upper([]byte("job.Update ſ")); got != "JOB.UPDATE ſ" {
		t.Errorf("Upper: %q", got)
	}
	if got := Lower([]byte("JOB.UPDATE \xffÉ")); got != "job.update \xffÉ" {
		t.Errorf("Lower: %q", got)
	}
	if n := testing.AllocsPerRun(100, func() { Is([]byte("count"), "COUNT") }); n != 0 {
		t.Errorf("Is allocates %v times", n)
	}
}
