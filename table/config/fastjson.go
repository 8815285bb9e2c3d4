package config

import (
	"encoding/json"
)

// fastJSON builds parseJSON's tree in one pass over data, without
// encoding/json's token machinery (which took 110 ms of a 32 × 256
// config's 130). It takes the plain case alone: anything it is not sure
// of (a syntax error, an escape or a byte above ASCII in a string, too
// deep a nesting) makes it give up, ok false, and parseJSON then reads
// the whole input the slow way, so that every error and every odd string
// is encoding/json's own. TestFastJSONAgrees holds it to that.
func fastJSON(data []byte) (v *jsonValue, ok bool) {
	p := fastParser{data: data}
	v = p.value(0)
	if p.fail {
		return nil, false
	}
	p.space()
	if p.i != len(p.data) {
		return nil, false
	}
	return v, true
}

type fastParser struct {
	data []byte
	i    int
	fail bool
}

func (p *fastParser) space() {
	for p.i < len(p.data) {
		switch p.data[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *fastParser) value(depth int) *jsonValue {
	if depth > maxJSONDepth {
		p.fail = true
		return nil
	}
	p.space()
	if p.i >= len(p.data) {
		p.fail = true
		return nil
	}
	switch c := p.data[p.i]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		s := p.str()
		if p.fail {
			return nil
		}
		return &jsonValue{kind: jsonString, str: s}
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	default:
		for _, lit := range []struct {
			text string
			v    jsonValue
		}{{"true", jsonValue{kind: jsonBool, boolean: true}}, {"false", jsonValue{kind: jsonBool}}, {"null", jsonValue{kind: jsonNull}}} {
			if len(p.data)-p.i >= len(lit.text) && string(p.data[p.i:p.i+len(lit.text)]) == lit.text {
				p.i += len(lit.text)
				v := lit.v
				return &v
			}
		}
		p.fail = true
		return nil
	}
}

// object reads an object, from its '{'.
func (p *fastParser) object(depth int) *jsonValue {
	p.i++
	v := &jsonValue{kind: jsonObject}
	var seen map[string]bool
	p.space()
	if p.i < len(p.data) && p.data[p.i] == '}' {
		p.i++
		return v
	}
	for !p.fail {
		p.space()
		if p.i >= len(p.data) || p.data[p.i] != '"' {
			p.fail = true
			return nil
		}
		key := p.str()
		p.space()
		if p.fail || p.i >= len(p.data) || p.data[p.i] != ':' {
			p.fail = true
			return nil
		}
		p.i++
		val := p.value(depth + 1)
		if p.fail {
			return nil
		}
		// Duplicates as decodeValue finds them: a map once an object
		// has more than a few keys.
		dup := false
		if len(v.members) < 8 {
			for _, m := range v.members {
				if m.key == key {
					dup = true
					break
				}
			}
		} else {
			if seen == nil {
				seen = make(map[string]bool, 16)
				for _, m := range v.members {
					seen[m.key] = true
				}
			}
			dup = seen[key]
			seen[key] = true
		}
		if dup {
			v.dups = append(v.dups, key)
		}
		v.members = append(v.members, jsonMember{key, val})
		if !p.next('}') {
			break
		}
	}
	if p.fail {
		return nil
	}
	return v
}

// array reads an array, from its '['.
func (p *fastParser) array(depth int) *jsonValue {
	p.i++
	v := &jsonValue{kind: jsonArray}
	p.space()
	if p.i < len(p.data) && p.data[p.i] == ']' {
		p.i++
		return v
	}
	for !p.fail {
		e := p.value(depth + 1)
		if p.fail {
			return nil
		}
		v.elems = append(v.elems, e)
		if !p.next(']') {
			break
		}
	}
	if p.fail {
		return nil
	}
	return v
}

// next reads the ',' before another element (true) or the closing
// delimiter (false).
func (p *fastParser) next(end byte) bool {
	p.space()
	if p.i < len(p.data) {
		switch p.data[p.i] {
		case ',':
			p.i++
			return true
		case end:
			p.i++
			return false
		}
	}
	p.fail = true
	return false
}

// str reads a string whose opening quote is at p.i.
func (p *fastParser) str() string {
	start := p.i
	p.i++
	plain := true
	for p.i < len(p.data) {
		switch c := p.data[p.i]; {
		case c == '"':
			p.i++
			if plain {
				return string(p.data[start+1 : p.i-1])
			}
			// Escapes and UTF-8 (invalid bytes included) as encoding/json
			// reads them.
			var s string
			if err := json.Unmarshal(p.data[start:p.i], &s); err != nil {
				p.fail = true
				return ""
			}
			return s
		case c == '\\':
			plain = false
			p.i += 2
		case c < 0x20:
			p.fail = true
			return ""
		case c >= 0x80:
			plain = false
			p.i++
		default:
			p.i++
		}
	}
	p.fail = true
	return ""
}

// number reads a number as JSON's grammar has it, kept as its text (as
// UseNumber does).
func (p *fastParser) number() *jsonValue {
	start := p.i
	digits := func() int {
		n := 0
		for p.i < len(p.data) && p.data[p.i] >= '0' && p.data[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	if p.data[p.i] == '-' {
		p.i++
	}
	if p.i < len(p.data) && p.data[p.i] == '0' {
		p.i++
	} else if digits() == 0 {
		p.fail = true
		return nil
	}
	if p.i < len(p.data) && p.data[p.i] == '.' {
		p.i++
		if digits() == 0 {
			p.fail = true
			return nil
		}
	}
	if p.i < len(p.data) && (p.data[p.i] == 'e' || p.data[p.i] == 'E') {
		p.i++
		if p.i < len(p.data) && (p.data[p.i] == '+' || p.data[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			p.fail = true
			return nil
		}
	}
	return &jsonValue{kind: jsonNumber, num: json.Number(p.data[start:p.i])}
}
