package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// jsonValue is a parsed JSON value that keeps object members in order and
// remembers duplicate keys. encoding/json silently keeps the last of two
// equal keys, which would let a typo'd config pass review looking different
// from what is built, so the config parser walks this tree instead.
type jsonValue struct {
	kind    jsonKind
	members []jsonMember // kind == jsonObject, in input order
	dups    []string     // keys seen more than once in this object
	elems   []*jsonValue // kind == jsonArray
	str     string       // kind == jsonString
	num     json.Number  // kind == jsonNumber
	boolean bool         // kind == jsonBool
}

type jsonMember struct {
	key string
	val *jsonValue
}

type jsonKind int

const (
	jsonNull jsonKind = iota
	jsonBool
	jsonNumber
	jsonString
	jsonArray
	jsonObject
)

func (k jsonKind) String() string {
	return [...]string{"null", "a boolean", "a number", "a string", "an array", "an object"}[k]
}

// maxJSONDepth bounds nesting so hostile input cannot exhaust the stack.
const maxJSONDepth = 64

// parseJSON decodes exactly one JSON value from data. Syntax errors carry a
// line and column.
func parseJSON(data []byte) (*jsonValue, error) {
	if v, ok := fastJSON(data); ok {
		return v, nil
	}
	return slowJSON(data)
}

// slowJSON is parseJSON by encoding/json's decoder: every input it reads,
// every error its own, with a line and column.
func slowJSON(data []byte) (*jsonValue, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			err = errors.New("unexpected data after the top-level value")
		}
	}
	if err != nil {
		line, col := lineCol(data, dec.InputOffset())
		return nil, fmt.Errorf("line %d, column %d: %w", line, col, err)
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, depth int) (*jsonValue, error) {
	if depth > maxJSONDepth {
		return nil, errors.New("nested too deeply")
	}
	tok, err := dec.Token()
	if err == io.EOF {
		return nil, errors.New("unexpected end of input")
	}
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			v := &jsonValue{kind: jsonObject}
			seen := map[string]bool{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key, ok := kt.(string)
				if !ok {
					return nil, errors.New("object key is not a string")
				}
				val, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				if seen[key] {
					v.dups = append(v.dups, key)
				}
				seen[key] = true
				v.members = append(v.members, jsonMember{key, val})
			}
			if _, err := dec.Token(); err != nil { // '}'
				return nil, err
			}
			return v, nil
		case '[':
			v := &jsonValue{kind: jsonArray}
			for dec.More() {
				e, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				v.elems = append(v.elems, e)
			}
			if _, err := dec.Token(); err != nil { // ']'
				return nil, err
			}
			return v, nil
		}
		return nil, fmt.Errorf("unexpected %q", rune(t))
	case string:
		return &jsonValue{kind: jsonString, str: t}, nil
	case json.Number:
		return &jsonValue{kind: jsonNumber, num: t}, nil
	case bool:
		return &jsonValue{kind: jsonBool, boolean: t}, nil
	case nil:
		return &jsonValue{kind: jsonNull}, nil
	}
	return nil, fmt.Errorf("unexpected token %v", tok)
}

func lineCol(data []byte, off int64) (line, col int) {
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	before := data[:off]
	line = bytes.Count(before, []byte{'\n'}) + 1
	col = int(off) - (bytes.LastIndexByte(before, '\n') + 1) + 1
	return line, col
}

// get returns the member named key, or nil.
func (v *jsonValue) get(key string) *jsonValue {
	for _, m := range v.members {
		if m.key == key {
			return m.val
		}
	}
	return nil
}

// brief renders a value for an error message: strings quoted, containers
// summarised, long text cut so an error never floods a terminal.
func (v *jsonValue) brief() string {
	var s string
	switch v.kind {
	case jsonString:
		b, _ := json.Marshal(v.str)
		s = string(b)
	case jsonNumber:
		s = v.num.String()
	case jsonBool:
		s = fmt.Sprint(v.boolean)
	case jsonNull:
		s = "null"
	case jsonArray:
		s = fmt.Sprintf("an array of %d", len(v.elems))
	case jsonObject:
		s = "an object"
	}
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}
