package resp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/tidwall/redcon"
)

// Small limits so that the fuzzer reaches every one of them.
var guardFuzzLimits = Limits{MaxArgs: 8, MaxBulk: 64, MaxInline: 64, MaxCommand: 200}

func FuzzGuard(f *testing.F) {
	seeds := []string{
		"*1\r\n$9223372036854775807\r\n",
		"*9000000000000000000\r\n",
		"*1\r\n$1073741824\r\n",
		string(guardRandom(4<<10, 1)),
		string(bytes.Repeat([]byte("a"), 300)),
		"*-1\r\n",
		"*0\r\n",
		"*2\r\n$3\r\nGET\r\nx",
		"*1\n$4\r\nPING\r\n",
		"*1\r\n$4\nPING\r\n",
		"ECHO \"abc\r\n",
		"ECHO \"a\"b\r\n",
		"a b c d e f g h i\r\n",
		"\"\" '' \"a b\" c \"d\\\"e\" f 'g' h\r\n",
		"*9\r\n",
		"*3\r\n$64\r\n" + string(bytes.Repeat([]byte("y"), 64)) + "\r\n$64\r\n" + string(bytes.Repeat([]byte("y"), 64)) + "\r\n$64\r\n",
	}
	for _, input := range guardValidTraffic {
		if len(input) < 1000 {
			seeds = append(seeds, input)
		}
	}
	for i, s := range seeds {
		f.Add([]byte(s), uint64(i))
	}
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		lim := guardFuzzLimits
		whole, wholeErr := guardPipe(t, lim, data, func() int { return len(data) }, 1<<16)
		r := rand.New(rand.NewPCG(seed, uint64(len(data))))
		chunks := func() int {
			if r.IntN(4) == 0 {
				return 1 + r.IntN(256)
			}
			return 1 + r.IntN(8)
		}
		split, splitErr := guardPipe(t, lim, data, chunks, 1+r.IntN(100))

		verdict := guardVerdict(t, wholeErr)
		if v := guardVerdict(t, splitErr); v != verdict {
			t.Fatalf("verdict %q when split, %q when whole", v, verdict)
		}
		wholeDone := guardFuzzCheck(t, lim, data, whole)
		if splitDone := guardFuzzCheck(t, lim, data, split); splitDone != wholeDone {
			t.Fatalf("%d bytes of complete commands accepted when split, %d when whole", splitDone, wholeDone)
		}
		if verdict == "" && len(whole) != len(data) {
			t.Fatalf("no violation, yet only %d of %d bytes accepted", len(whole), len(data))
		}
	})
}

func guardVerdict(t *testing.T, err error) string {
	t.Helper()
	var v *guardViolation
	switch {
	case err == io.EOF:
		return ""
	case errors.As(err, &v):
		return v.reason
	}
	t.Fatalf("unexpected error %v", err)
	return ""
}

// guardFuzzCheck checks bytes a guard accepted from data and returns how
// many of them form complete commands. Commands split across reads may leave
// part of the offending command accepted; that part depends on the split.
func guardFuzzCheck(t *testing.T, lim Limits, data, accepted []byte) int {
	t.Helper()
	if !bytes.HasPrefix(data, accepted) {
		t.Fatal("accepted bytes are not a prefix of the input")
	}
	done, err := guardOracle(accepted, lim)
	if err != nil {
		t.Fatalf("accepted %q: %v", accepted, err)
	}
	rd := redcon.NewReader(bytes.NewReader(accepted))
	for i := 0; ; i++ {
		if i > len(accepted) {
			t.Fatal("redcon does not stop reading the accepted bytes")
		}
		cmds, err := rd.ReadCommands()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("redcon rejects accepted %q: %v", accepted, err)
		}
		for _, cmd := range cmds {
			if len(cmd.Args) > lim.MaxArgs {
				t.Fatalf("redcon read %d arguments from accepted %q", len(cmd.Args), accepted)
			}
		}
	}
	return done
}

// guardOracle checks, reading the whole buffer at once, that b is a run of
// well-formed commands within lim, the last one possibly cut short, and
// returns how many bytes the complete ones take.
func guardOracle(b []byte, lim Limits) (int, error) {
	done := 0
	for done < len(b) {
		n, err := guardOracleCommand(b[done:], lim)
		if err != nil || n == 0 {
			return done, err
		}
		done += n
	}
	return done, nil
}

// guardOracleCommand returns the length of the command b starts with, or 0
// if b ends before it does.
func guardOracleCommand(b []byte, lim Limits) (int, error) {
	if b[0] != '*' {
		end := bytes.IndexByte(b, '\n')
		if end < 0 {
			end = len(b)
		}
		if end > lim.MaxInline {
			return 0, fmt.Errorf("inline line of %d bytes", end)
		}
		if end == len(b) {
			return 0, nil
		}
		return end + 1, nil
	}
	count, off, err := guardOracleNumber(b, 1, int64(lim.MaxArgs))
	if err != nil || off == 0 {
		return 0, err
	}
	if count < 1 {
		return 0, errors.New("no arguments")
	}
	for range count {
		if off > int(lim.MaxCommand) {
			return 0, errors.New("command too large")
		}
		if off == len(b) {
			return 0, nil
		}
		if b[off] != '$' {
			return 0, fmt.Errorf("%q where '$' belongs", b[off])
		}
		size, next, err := guardOracleNumber(b, off+1, lim.MaxBulk)
		if err != nil || next == 0 {
			return 0, err
		}
		end := next + int(size) + 2
		if end > int(lim.MaxCommand) {
			return 0, errors.New("command too large")
		}
		if crlf := b[min(len(b), end-2):min(len(b), end)]; !bytes.HasPrefix([]byte("\r\n"), crlf) {
			return 0, fmt.Errorf("%q after a bulk", crlf)
		}
		if end > len(b) {
			return 0, nil
		}
		off = end
	}
	return off, nil
}

// guardOracleNumber parses the decimal line at b[at:] and returns it and
// where the next line starts, or 0 if b ends first.
func guardOracleNumber(b []byte, at int, limit int64) (int64, int, error) {
	line, _, found := bytes.Cut(b[at:], []byte("\r\n"))
	if !found {
		line = bytes.TrimSuffix(line, []byte("\r"))
	}
	for _, c := range line {
		if c < '0' || c > '9' {
			return 0, 0, fmt.Errorf("length %q", line)
		}
	}
	if len(line) > 1 && line[0] == '0' || found && len(line) == 0 {
		return 0, 0, fmt.Errorf("length %q", line)
	}
	n, err := strconv.ParseInt(string(line), 10, 64)
	if len(line) > 0 && (err != nil || n > limit) {
		return 0, 0, fmt.Errorf("length %q over %d", line, limit)
	}
	if !found {
		return 0, 0, nil
	}
	return n, at + len(line) + 2, nil
}
