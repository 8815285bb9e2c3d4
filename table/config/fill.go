package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// FillHealth writes data, a config that leaves some backends' health to
// the checks, with their "healthy" filled in from health (by table and
// backend position): the file GLB's glb-healthcheck writes for its
// director. Everything else, the order of keys included, is kept; the
// output is indented.
func FillHealth(data []byte, health func(table, backend int) bool) ([]byte, error) {
	root, err := parseJSON(data)
	if err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	if tables := root.get("tables"); tables != nil && tables.kind == jsonArray {
		for i, tv := range tables.elems {
			bs := tv.get("backends")
			if tv.kind != jsonObject || bs == nil || bs.kind != jsonArray {
				continue
			}
			for j, b := range bs.elems {
				if b.kind == jsonObject && b.get("healthy") == nil {
					b.members = append(b.members, jsonMember{"healthy", &jsonValue{kind: jsonBool, boolean: health(i, j)}})
				}
			}
		}
	}
	var buf bytes.Buffer
	root.write(&buf, 0)
	buf.WriteByte('\n')
	return buf.Bytes(), nil
}

// write renders v as indented JSON, objects' members in their order.
func (v *jsonValue) write(b *bytes.Buffer, depth int) {
	pad := func(d int) string { return "\n" + strings.Repeat("  ", d) }
	switch v.kind {
	case jsonNull:
		b.WriteString("null")
	case jsonBool:
		fmt.Fprint(b, v.boolean)
	case jsonNumber:
		b.WriteString(v.num.String())
	case jsonString:
		s, _ := json.Marshal(v.str)
		b.Write(s)
	case jsonArray:
		if len(v.elems) == 0 {
			b.WriteString("[]")
			return
		}
		b.WriteByte('[')
		for i, e := range v.elems {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(pad(depth + 1))
			e.write(b, depth+1)
		}
		b.WriteString(pad(depth) + "]")
	case jsonObject:
		if len(v.members) == 0 {
			b.WriteString("{}")
			return
		}
		b.WriteByte('{')
		for i, m := range v.members {
			if i > 0 {
				b.WriteByte(',')
			}
			k, _ := json.Marshal(m.key)
			b.WriteString(pad(depth + 1))
			b.Write(k)
			b.WriteString(": ")
			m.val.write(b, depth+1)
		}
		b.WriteString(pad(depth) + "}")
	}
}
