package service

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"github.com/director/director/table/config"
)

// A watched file is one of the service's config files as the service
// reads it, on a host that may put anything at its path: only a regular
// file is read, it is opened without blocking (a FIFO there never stalls
// the loop), its size is checked before and while reading, and it is read
// again only when stat says it changed. What is at the path is looked at
// every poll; a version, good or bad, is read once.
type watched struct {
	path string
	max  int64
	what string // "a JSON config": for the size error

	seen bool
	sig  fileSig // of the version last looked at
	data []byte  // its contents, when it could be read
	err  error   // why it could not be read; nil when it was
}

// fileSig tells versions of a file apart without reading it: a rename
// into place changes the inode, an edit in place the size or times.
type fileSig struct {
	dev, ino     uint64
	mode         fs.FileMode
	size         int64
	mtime, ctime syscall.Timespec
}

func newWatched(path string, max int64, what string) *watched {
	return &watched{path: path, max: max, what: what}
}

// look looks at what is at the path and reads it if it is a version not
// seen yet (or always, with force). It reports whether the version is new.
func (w *watched) look(force bool) bool {
	sig, err := statSig(w.path)
	if err == nil && w.seen && sig == w.sig && !force {
		return false
	}
	if err != nil {
		// Nothing there, or nothing that can be looked at: a version of
		// its own, as long as the reason stays the same.
		changed := !w.seen || w.err == nil || w.err.Error() != err.Error()
		w.seen, w.sig, w.data, w.err = true, fileSig{}, nil, err
		return changed || force
	}
	w.seen, w.sig = true, sig
	w.data, w.err = readRegular(w.path, w.max, w.what)
	return true
}

// version names the version last looked at, for telling one bad version
// from the next: its contents' digest, or why it could not be read.
func (w *watched) version() string {
	if w.err != nil {
		return fmt.Sprintf("%s %v %d", w.err, w.sig.ino, w.sig.mtime.Nano())
	}
	return fmt.Sprintf("%x", sha256.Sum256(w.data))
}

func statSig(path string) (fileSig, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileSig{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileSig{}, fmt.Errorf("%s: cannot read its status", path)
	}
	return fileSig{dev: st.Dev, ino: st.Ino, mode: fi.Mode(), size: st.Size, mtime: st.Mtim, ctime: st.Ctim}, nil
}

// errNotRegular is what a config path holding anything but a regular file
// (a FIFO, a device, a directory, a socket) gets.
var errNotRegular = errors.New("not a regular file")

// readRegular reads path if it is a regular file of at most max bytes.
// It opens it non-blocking (opening a FIFO for reading would wait for a
// writer), checks what it opened, and reads at most max+1 bytes.
func readRegular(path string, max int64, what string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, config.InFile(path, fmt.Errorf("%w: it is %s", errNotRegular, kindOf(fi.Mode())))
	}
	tooBig := func(size string) error {
		return config.InFile(path, fmt.Errorf("%s bytes; %s may be at most %d bytes (%d MiB)", size, what, max, max>>20))
	}
	if fi.Size() > max {
		return nil, tooBig(fmt.Sprint(fi.Size()))
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, config.InFile(path, err)
	}
	if int64(len(data)) > max {
		return nil, tooBig("more than " + fmt.Sprint(max))
	}
	return data, nil
}

func kindOf(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "not a regular file (" + m.String() + ")"
}
