package worker

import (
	"os"
	"testing"

	"github.com/agq/agq/internal/agqtest"
)

// The worker's tests talk to a real agq: in-process nodes on a managed
// PostgreSQL, started by agqtest. Test-only imports do not make the agw
// binary import any of the server's packages.
func TestMain(m *testing.M) { os.Exit(agqtest.Main(m)) }
