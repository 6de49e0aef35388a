// Package plainjson encodes JSON as encoding/json does, but for people and
// for size: <, > and & are left as they are (escaped, a report of HTML
// would be up to six times its size), and no newline ends the text. The
// client's reports are encoded so, and agw sizes its reports by it; it
// imports nothing of agq, so that both may share it.
package plainjson

import (
	"bytes"
	"encoding/json"
)

// Marshal encodes v as json.Marshal does, <, > and & left as they are.
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
