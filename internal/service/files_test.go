package service

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestWatchedFileRefusesWhatIsNotAFile: whatever is put at the path, a
// look returns at once, reads at most the limit, and says why; the same
// version is looked at once.
func TestWatchedFileRefusesWhatIsNotAFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "live.json")
	w := newWatched(path, 1<<20, "a JSON config")
	put := func(make func(tmp string) error) {
		t.Helper()
		tmp := filepath.Join(dir, "x")
		os.Remove(tmp)
		if err := make(tmp); err != nil {
			t.Fatal(err)
		}
		os.RemoveAll(path) // a directory is not renamed over a file, nor a file over it
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	look := func(wantNew bool, wantErr string) {
		t.Helper()
		done := make(chan bool, 1)
		go func() { done <- w.look(false) }()
		select {
		case got := <-done:
			if got != wantNew {
				t.Errorf("look: new version %v, want %v", got, wantNew)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("look blocked")
		}
		if wantErr == "" && w.err != nil || wantErr != "" && (w.err == nil || !strings.Contains(w.err.Error(), wantErr)) {
			t.Errorf("look: %v, want %q", w.err, wantErr)
		}
	}
	put(func(tmp string) error { return os.WriteFile(tmp, []byte(`{"tables": []}`), 0o644) })
	look(true, "")
	look(false, "") // the same version: not read again
	if string(w.data) != `{"tables": []}` {
		t.Fatalf("data %q", w.data)
	}
	put(func(tmp string) error { return syscall.Mkfifo(tmp, 0o644) })
	look(true, "not a regular file: it is a FIFO")
	look(false, "not a regular file")
	put(func(tmp string) error { return os.Symlink("/dev/zero", tmp) })
	look(true, "not a regular file: it is a character device")
	put(func(tmp string) error { return os.Mkdir(tmp, 0o755) })
	look(true, "it is a directory")
	put(func(tmp string) error {
		f, err := os.Create(tmp)
		if err != nil {
			return err
		}
		defer f.Close()
		return f.Truncate(20 << 30) // sparse: 20 GB that cost nothing
	})
	look(true, "21474836480 bytes; a JSON config may be at most 1048576 bytes (1 MiB)")
	if w.data != nil {
		t.Fatal("a file over the limit was read")
	}
	put(func(tmp string) error { return os.Symlink(filepath.Join(dir, "nowhere"), tmp) })
	look(true, "no such file or directory")
	look(false, "no such file or directory")
	put(func(tmp string) error { return os.WriteFile(tmp, []byte(`{"tables": [1]}`), 0o644) })
	look(true, "")
	// An edit in place is a new version.
	time.Sleep(10 * time.Millisecond)
	if err := os.WriteFile(path, []byte(`{"tables": [2]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	look(true, "")
	if string(w.data) != `{"tables": [2]}` {
		t.Fatalf("data %q", w.data)
	}
}
