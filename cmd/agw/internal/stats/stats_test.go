package stats

import (
	"errors"
	"os"
	"runtime"
	"testing"
	"time"
)

func TestParseCPU(t *testing.T) {
	t.Parallel()
	raw := []byte("cpu  100 5 50 800 40 3 2 0 10 0\ncpu0 50 2 25 400 20 1 1 0 5 0\nintr 1\n")
	got, err := parseCPU(raw)
	if err != nil {
		t.Fatal(err)
	}
	if want := (cpuTimes{busy: 160, total: 1000}); got != want {
		t.Fatalf("%+v, want %+v", got, want)
	}
	if _, err := parseCPU([]byte("intr 1\n")); err == nil {
		t.Fatal("accepted /proc/stat without a cpu line")
	}
	if p := (cpuTimes{busy: 160 + 45, total: 1000 + 100}).percentSince(got); p != 45 {
		t.Fatalf("percent %v, want 45", p)
	}
	if p := got.percentSince(got); p != 0 {
		t.Fatalf("no time passed: %v", p)
	}
}

func TestMemoryUsed(t *testing.T) {
	t.Parallel()
	raw := []byte("MemTotal:       16000000 kB\nMemFree:         1000000 kB\nMemAvailable:    6000000 kB\n")
	used, err := memoryUsedKiB(raw)
	if err != nil || used != 10000000 {
		t.Fatalf("%d, %v", used, err)
	}
	if _, err := memoryUsedKiB([]byte("MemTotal: 1 kB\n")); err == nil {
		t.Fatal("accepted meminfo without MemAvailable")
	}
}

func TestSample(t *testing.T) {
	t.Parallel()

	t.Run("FromFakeProc", func(t *testing.T) {
		t.Parallel()
		stat := "cpu  100 0 0 900 0 0 0 0\n"
		s := &Sampler{
			started: time.Now(),
			readFile: func(name string) ([]byte, error) {
				switch name {
				case "/proc/stat":
					return []byte(stat), nil
				case "/proc/meminfo":
					return []byte("MemTotal: 2097152 kB\nMemAvailable: 1048576 kB\n"), nil
				}
				return nil, os.ErrNotExist
			},
			diskFree: func(string) (uint64, error) { return 5<<30 + 1<<29, nil },
		}
		s.prevCPU, _ = s.cpu()
		stat = "cpu  130 0 0 970 0 0 0 0\n"
		got := s.Sample(Counters{Active: 2, Completed: 150, Failed: 3})
		want := Stats{ActiveJobs: 2, CompletedJobsTotal: 150, FailedJobsTotal: 3, UptimeSeconds: got.UptimeSeconds,
			CPUUsagePercent: 30, MemoryMB: 1024, DiskAvailableGB: 5}
		if got != want {
			t.Fatalf("%+v, want %+v", got, want)
		}
	})

	t.Run("MissingSourcesGiveZeros", func(t *testing.T) {
		t.Parallel()
		s := &Sampler{
			started:  time.Now(),
			readFile: func(string) ([]byte, error) { return nil, os.ErrNotExist },
			diskFree: func(string) (uint64, error) { return 0, errors.New("no statfs") },
		}
		if got := s.Sample(Counters{Completed: 1}); got != (Stats{CompletedJobsTotal: 1}) {
			t.Fatalf("%+v", got)
		}
	})

	t.Run("ThisMachine", func(t *testing.T) {
		t.Parallel()
		if runtime.GOOS != "linux" {
			t.Logf("machine figures are only sampled on Linux")
			return
		}
		st := NewSampler(t.TempDir()).Sample(Counters{})
		if st.MemoryMB <= 0 || st.CPUUsagePercent < 0 || st.CPUUsagePercent > 100 || st.UptimeSeconds != 0 {
			t.Fatalf("%+v", st)
		}
		if free, err := diskAvailable(t.TempDir()); err != nil || free == 0 {
			t.Fatalf("disk available %d, %v", free, err)
		}
	})
}
