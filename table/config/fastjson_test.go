package config

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// agree checks fastJSON against slowJSON on data: where the fast one
// takes an input, the slow one takes it too and builds the same tree.
func agree(t *testing.T, name string, data []byte) (fastTook bool) {
	t.Helper()
	fast, ok := fastJSON(data)
	slow, err := slowJSON(data)
	if !ok {
		return false
	}
	if err != nil {
		t.Fatalf("%s: the fast parser took %q, which encoding/json refuses: %v", name, data, err)
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("%s: the parsers' trees differ for %q", name, data)
	}
	return true
}

// TestFastJSONAgrees: the fast parser gives encoding/json's tree for
// every config in testdata and for thousands of mutations of them (bytes
// changed, inserted, removed, lines cut), and gives up on the inputs it
// should: the errors stay encoding/json's.
func TestFastJSONAgrees(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/configs/*.json")
	if len(files) == 0 {
		t.Fatal("no configs in testdata")
	}
	alphabet := []byte("{}[],:\"\\ \n\t-+.0123456789eEtrufalsn\x00\x1f\x7f\xc3\xa9\xff/u")
	rng := rand.New(rand.NewPCG(1, 2))
	took, gaveUp := 0, 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) > 64<<10 {
			data = data[:64<<10] // the big one: its start, cut
		} else if !agree(t, f, data) {
			t.Fatalf("%s: the fast parser gave up on a good config", f)
		}
		for i := 0; i < 300; i++ {
			m := append([]byte(nil), data...)
			for n := 1 + rng.IntN(3); n > 0 && len(m) > 0; n-- {
				at := rng.IntN(len(m))
				switch rng.IntN(4) {
				case 0:
					m[at] = alphabet[rng.IntN(len(alphabet))]
				case 1:
					m = append(m[:at], append([]byte{alphabet[rng.IntN(len(alphabet))]}, m[at:]...)...)
				case 2:
					m = append(m[:at], m[at+1:]...)
				case 3:
					m = m[:at]
				}
			}
			if agree(t, f, m) {
				took++
			} else {
				gaveUp++
			}
		}
	}
	for _, s := range []string{`{"a":"\u00e9\n","b":"é","c":"` + "\xff" + `"}`, `[1, -0, 0.5e+3, 1E9, -12.0]`, `{"a":1,"a":2,"b":{},"c":[]}`,
		`  {"k": [true, false, null]}  `, `"x"`, `{"a": "\ud800"}`} {
		if !agree(t, s, []byte(s)) {
			t.Errorf("the fast parser gave up on %s", s)
		}
	}
	for _, s := range []string{``, `{`, `{"a":1,}`, `[1,]`, `01`, `-`, `1.`, `1e`, `{"a" 1}`, `[1] x`, `"a` + "\x01" + `"`, `nul`, `{"a":"\x"}`} {
		if agree(t, s, []byte(s)) {
			t.Errorf("the fast parser took %q", s)
		}
	}
	t.Logf("mutations: fast took %d, gave up on %d", took, gaveUp)
	if took == 0 || gaveUp == 0 {
		t.Fatal("the mutations do not exercise both ways")
	}
}

// FuzzFastJSON: go test ./table/config -fuzz FastJSON
func FuzzFastJSON(f *testing.F) {
	f.Add([]byte(`{"tables": [{"name": "a", "backends": [{"ip": "10.0.0.1"}]}]}`))
	f.Add([]byte(`[1, "\u00e9", {"a": null}]`))
	f.Fuzz(func(t *testing.T, data []byte) { agree(t, "fuzz", data) })
}
