package payment

// plainJSON reports, in one pass over the bytes and without allocating,
// that body is a plain object checkJSON surely accepts: members named
// without escapes, each once, only fields at the top; values that are
// strings without escapes, integers, true, false, or (at the top) an object
// of such members; nothing after it but white space. A null is never plain:
// the walk refuses it, naming the field. It is the fast
// path of checkJSON, which walks every other body token by token and says
// what is wrong with it: false means "not sure", never "invalid". The body is
// valid UTF-8 (checked before).
func plainJSON(body []byte, fields map[string]bool) bool {
	p := plainScanner{b: body}
	p.space()
	if !p.object(fields) {
		return false
	}
	p.space()
	return p.i == len(p.b)
}

type plainScanner struct {
	b []byte
	i int
}

func (p *plainScanner) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *plainScanner) next(c byte) bool {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// object scans an object at p.i; fields are the names it may hold, or nil
// for a nested object (any names, scalar values only).
func (p *plainScanner) object(fields map[string]bool) bool {
	if !p.next('{') {
		return false
	}
	if p.next('}') {
		return true
	}
	var names [maxPlainMembers][]byte
	for n := 0; ; n++ {
		p.space()
		name, ok := p.str()
		if !ok || n == maxPlainMembers || (fields != nil && !fields[string(name)]) {
			return false
		}
		for _, seen := range names[:n] {
			if string(seen) == string(name) {
				return false
			}
		}
		names[n] = name
		if !p.next(':') {
			return false
		}
		p.space()
		if p.i < len(p.b) && p.b[p.i] == '{' {
			if fields == nil || !p.object(nil) {
				return false
			}
		} else if !p.scalar() {
			return false
		}
		if p.next('}') {
			return true
		}
		if !p.next(',') {
			return false
		}
	}
}

// maxPlainMembers bounds an object the fast path takes: the pairwise check
// for duplicates stays cheap, and bigger metadata takes the slow path.
const maxPlainMembers = 16

// str scans a string without escapes or control characters and returns
// its contents.
func (p *plainScanner) str() ([]byte, bool) {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return nil, false
	}
	start := p.i + 1
	for j := start; j < len(p.b); j++ {
		switch c := p.b[j]; {
		case c == '"':
			p.i = j + 1
			return p.b[start:j], true
		case c == '\\' || c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

// scalar scans a string, an integer (JSON's grammar: no leading zero), true
// or false.
func (p *plainScanner) scalar() bool {
	if p.i >= len(p.b) {
		return false
	}
	switch c := p.b[p.i]; {
	case c == '"':
		_, ok := p.str()
		return ok
	case c == '-' || ('0' <= c && c <= '9'):
		return p.integer()
	}
	for _, lit := range [...]string{"true", "false"} {
		if len(p.b)-p.i >= len(lit) && string(p.b[p.i:p.i+len(lit)]) == lit {
			p.i += len(lit)
			return true
		}
	}
	return false
}

func (p *plainScanner) integer() bool {
	if p.b[p.i] == '-' {
		p.i++
	}
	start := p.i
	for p.i < len(p.b) && '0' <= p.b[p.i] && p.b[p.i] <= '9' {
		p.i++
	}
	switch n := p.i - start; {
	case n == 0, n > 1 && p.b[start] == '0':
		return false
	}
	// A fraction or an exponent is valid JSON the slow path words an error
	// for; a letter glued on is not JSON at all.
	return p.i == len(p.b) || !isNumberTail(p.b[p.i])
}

func isNumberTail(c byte) bool {
	return c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-' || ('0' <= c && c <= '9') ||
		('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
}

// plainRequest decodes body as encoding/json decodes it into a wireRequest,
// in one pass, when plainJSON accepts it and every value has its field's
// type. ok false means "decode it the slow way", which also words any error.
func plainRequest(body []byte) (w wireRequest, ok bool) {
	if !plainJSON(body, requestFields) {
		return w, false
	}
	ok = plainMembers(body, func(name, raw []byte) bool {
		switch string(name) {
		case "amount":
			w.Amount = raw
			return true
		case "currency":
			return plainString(raw, &w.Currency)
		case "source":
			return plainString(raw, &w.Source)
		case "description":
			return plainString(raw, &w.Description)
		}
		return plainMetadata(raw, &w.Metadata)
	})
	return w, ok
}

// plainMembers calls member with the name and raw value of each member of
// obj, a plain object, until it returns false.
func plainMembers(obj []byte, member func(name, raw []byte) bool) bool {
	p := plainScanner{b: obj}
	if !p.next('{') {
		return false
	}
	if p.next('}') {
		return true
	}
	for {
		p.space()
		name, ok := p.str()
		if !ok || !p.next(':') {
			return false
		}
		p.space()
		start := p.i
		if p.i < len(p.b) && p.b[p.i] == '{' {
			ok = p.object(nil)
		} else {
			ok = p.scalar()
		}
		if !ok || !member(name, p.b[start:p.i]) {
			return false
		}
		if p.next('}') {
			return true
		}
		if !p.next(',') {
			return false
		}
	}
}

// plainString sets *dst to the string raw holds.
func plainString(raw []byte, dst *string) bool {
	if raw[0] != '"' {
		return false
	}
	*dst = string(raw[1 : len(raw)-1])
	return true
}

// plainMetadata sets *dst to the object of strings raw holds.
func plainMetadata(raw []byte, dst *map[string]string) bool {
	if raw[0] != '{' {
		return false
	}
	m := map[string]string{}
	ok := plainMembers(raw, func(name, v []byte) bool {
		if v[0] != '"' {
			return false
		}
		m[string(name)] = string(v[1 : len(v)-1])
		return true
	})
	*dst = m
	return ok
}
