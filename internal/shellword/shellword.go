// Package shellword spells commands the tools print for a person to run,
// so that they run as printed when pasted into a shell.
package shellword

import "strings"

// Join is words as one shell command line: a word with anything a shell
// would read is single-quoted.
func Join(words ...string) string {
	out := make([]string, len(words))
	for i, w := range words {
		if w == "" || strings.ContainsFunc(w, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,@+%", r))
		}) {
			w = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
		}
		out[i] = w
	}
	return strings.Join(out, " ")
}
