package node

import (
	"strings"

	"github.com/rs/zerolog"
)

// debugWriter puts what net/http logs (a client's failed TLS handshake, a
// broken connection) into the node's log at debug level: it is the
// client's trouble, and the log stays JSON.
type debugWriter struct{ log zerolog.Logger }

func (w debugWriter) Write(p []byte) (int, error) {
	w.log.Debug().Msg(strings.TrimSpace(string(p)))
	return len(p), nil
}
