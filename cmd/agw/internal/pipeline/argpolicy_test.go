package pipeline

import (
	"errors"
	"testing"
)

func TestCheckArgs(t *testing.T) {
	t.Parallel()
	allowed := []struct {
		tool string
		args []string
	}{
		{"sort", []string{"-r"}},
		{"sort", []string{"-k2,2n", "-t", ",", "-u"}},
		{"sort", []string{"-t", "o"}},           // "o" is -t's value
		{"sort", []string{"-to"}},               // likewise, attached
		{"sort", []string{"-S", "1M", "input"}}, // reading a file is allowed
		{"sort", []string{"--", "-o"}},          // a file named -o
		{"sort", []string{"--check"}},
		{"uniq", []string{"-c"}},
		{"uniq", []string{"-c", "input"}},
		{"uniq", []string{"-f", "1", "input"}},
		{"uniq", []string{"--skip-fields", "1", "input"}},
		{"uniq", []string{"--skip-fields=1", "-"}},
		{"date", []string{"-u", "+%Y-%m-%d"}},
		{"date", []string{"-Iseconds"}},
		{"date", []string{"-uIs"}},
		{"date", []string{"-d", "2020-01-01", "+%s"}},
		{"date", []string{"-ds"}}, // "s" is -d's value
		{"grep", []string{"-o", "x"}},
		{"cat", nil},
	}
	for _, tt := range allowed {
		if err := checkArgs(1, tt.tool, tt.args); err != nil {
			t.Errorf("%s %q: %v", tt.tool, tt.args, err)
		}
	}

	refused := []struct {
		tool string
		args []string
	}{
		{"sort", []string{"-o", "/etc/passwd"}},
		{"sort", []string{"-o/etc/passwd"}},
		{"sort", []string{"-ro", "f"}},
		{"sort", []string{"-yo/etc/passwd"}}, // sort reads o/… as -y's value; refused anyway
		{"sort", []string{"--output=/etc/passwd"}},
		{"sort", []string{"--out", "f"}},
		{"sort", []string{"--compress-program=sh"}},
		{"sort", []string{"--co", "sh"}},
		{"sort", []string{"input", "-o", "f"}}, // options after operands count
		{"sort", []string{"-t", "-o"}},         // errs on the side of refusing
		{"uniq", []string{"in", "out"}},
		{"uniq", []string{"-c", "-", "out"}},
		{"uniq", []string{"-f", "1", "in", "out"}},
		{"uniq", []string{"--", "in", "out"}},
		{"date", []string{"-s", "2020-01-01"}},
		{"date", []string{"-us", "2020-01-01"}},
		{"date", []string{"--set=2020-01-01"}},
		{"date", []string{"--se", "x"}},
		{"date", []string{"010203042025"}},
	}
	for _, tt := range refused {
		err := checkArgs(2, tt.tool, tt.args)
		if !errors.Is(err, ErrRefused) {
			t.Errorf("%s %q: err = %v, want a refusal", tt.tool, tt.args, err)
			continue
		}
		var e *Error
		if !errors.As(err, &e) || e.Task != 2 || e.Tool != tt.tool {
			t.Errorf("%s %q: error %#v does not name the task", tt.tool, tt.args, err)
		}
	}
}
