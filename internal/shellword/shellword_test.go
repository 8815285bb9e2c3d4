package shellword

import (
	"os/exec"
	"testing"
)

// TestJoin: a shell reads each word back as it was.
func TestJoin(t *testing.T) {
	words := []string{"director", "--bpffs", "/sys/fs/bpf/d 2", "it's", "", "a;b", "$HOME", "plain-word_1.json"}
	line := Join(words...)
	got, err := exec.Command("sh", "-c", "printf '[%s]' "+line[len("director "):]).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := ""
	for _, w := range words[1:] {
		want += "[" + w + "]"
	}
	if string(got) != want {
		t.Errorf("%s read back as %s, want %s", line, got, want)
	}
}
