package commands

// cleanJSON returns raw with the string escapes PostgreSQL's jsonb refuses —
// \u0000 and unpaired UTF-16 surrogates — replaced by \ufffd, the
// replacement character. A tool's output with a NUL byte in it must not
// keep a finished job from being reported. raw is valid JSON; it is
// returned unchanged (not copied) when there is nothing to replace.
func cleanJSON(raw []byte) []byte {
	var out []byte
	inString := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if !inString {
			inString = c == '"'
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			if i+1 < len(raw) && raw[i+1] == 'u' && i+6 <= len(raw) {
				if code, ok := hex4(raw[i+2 : i+6]); ok {
					bad := code == 0
					if code >= 0xD800 && code <= 0xDBFF { // high surrogate: a low one must follow
						low, ok := uint16(0), false
						if i+12 <= len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' {
							low, ok = hex4(raw[i+8 : i+12])
						}
						if ok && low >= 0xDC00 && low <= 0xDFFF {
							i += 11 // a valid pair
							continue
						}
						bad = true
					} else if code >= 0xDC00 && code <= 0xDFFF {
						bad = true // a low surrogate alone
					}
					if bad {
						if out == nil {
							out = append(make([]byte, 0, len(raw)), raw...)
						}
						copy(out[i:i+6], `\ufffd`)
					}
					i += 5
					continue
				}
			}
			i++ // skip the escaped character
		}
	}
	if out == nil {
		return raw
	}
	return out
}

func hex4(b []byte) (uint16, bool) {
	var v uint16
	for _, c := range b {
		switch {
		case '0' <= c && c <= '9':
			v = v<<4 | uint16(c-'0')
		case 'a' <= c && c <= 'f':
			v = v<<4 | uint16(c-'a'+10)
		case 'A' <= c && c <= 'F':
			v = v<<4 | uint16(c-'A'+10)
		default:
			return 0, false
		}
	}
	return v, true
}
