package engine_test

import (
	"os"
	"testing"

	"github.com/agq/agq/internal/agqtest"
)

func TestMain(m *testing.M) { os.Exit(agqtest.Main(m)) }
