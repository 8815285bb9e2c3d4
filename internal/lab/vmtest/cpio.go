package main

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// An initramfs is the guest's whole root file system, written as the
// kernel unpacks it: a gzipped cpio archive in the "newc" format
// (Documentation/driver-api/early-userspace/buffer-format.rst). Written
// here rather than with cpio(1), so the harness needs one tool less, and
// the archive is the same whatever the host's umask or file order.
type initramfs struct {
	entries map[string]entry // by path inside the archive, without a leading slash
}

type entry struct {
	mode   uint32 // file type and permissions, as stat's st_mode
	data   []byte // a file's contents, or a symlink's target
	source string // else: a file on the host to copy
}

const (
	modeDir     = 0o040000
	modeFile    = 0o100000
	modeSymlink = 0o120000
)

func newInitramfs() *initramfs { return &initramfs{entries: map[string]entry{}} }

// dir adds a directory and its parents.
func (r *initramfs) dir(p string) {
	p = strings.Trim(path.Clean(p), "/")
	for p != "" && p != "." {
		if _, ok := r.entries[p]; ok {
			return
		}
		r.entries[p] = entry{mode: modeDir | 0o755}
		p = path.Dir(p)
	}
}

// file adds a file with the given contents.
func (r *initramfs) file(p string, perm uint32, data []byte) {
	p = strings.Trim(path.Clean(p), "/")
	r.dir(path.Dir(p))
	r.entries[p] = entry{mode: modeFile | perm, data: data}
}

// copy adds the host file src at p, its contents read when the archive is
// written.
func (r *initramfs) copy(p, src string, perm uint32) {
	p = strings.Trim(path.Clean(p), "/")
	r.dir(path.Dir(p))
	r.entries[p] = entry{mode: modeFile | perm, source: src}
}

// symlink adds a symbolic link.
func (r *initramfs) symlink(p, target string) {
	p = strings.Trim(path.Clean(p), "/")
	r.dir(path.Dir(p))
	r.entries[p] = entry{mode: modeSymlink | 0o777, data: []byte(target)}
}

// tree adds the host directory src, recursively, at p.
func (r *initramfs) tree(p, src string) error {
	return filepath.WalkDir(src, func(hp string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, hp)
		ap := path.Join(p, filepath.ToSlash(rel))
		switch {
		case d.IsDir():
			r.dir(ap)
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			r.copy(ap, hp, uint32(info.Mode().Perm()))
		}
		return nil
	})
}

// write writes the gzipped archive, parents before children.
func (r *initramfs) write(w io.Writer) error {
	names := make([]string, 0, len(r.entries))
	for n := range r.entries {
		names = append(names, n)
	}
	sort.Strings(names) // a parent sorts before what it holds
	z, err := gzip.NewWriterLevel(w, gzip.BestSpeed)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(z, 1<<20)
	for i, n := range names {
		e := r.entries[n]
		data := e.data
		if e.source != "" {
			if data, err = os.ReadFile(e.source); err != nil {
				return err
			}
		}
		if err := cpioEntry(bw, uint32(i+1), n, e.mode, data); err != nil {
			return err
		}
	}
	if err := cpioEntry(bw, 0, "TRAILER!!!", 0, nil); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return z.Close()
}

// cpioEntry writes one newc header, the name and the data, each padded to
// four bytes.
func cpioEntry(w io.Writer, ino uint32, name string, mode uint32, data []byte) error {
	nlink := uint32(1)
	if mode&0o170000 == modeDir {
		nlink = 2
	}
	// magic, ino, mode, uid, gid, nlink, mtime, filesize, devmajor,
	// devminor, rdevmajor, rdevminor, namesize, check
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	buf := make([]byte, 0, len(hdr)+len(name)+4)
	buf = append(buf, hdr...)
	buf = append(buf, name...)
	buf = append(buf, 0)
	buf = append(buf, make([]byte, pad4(len(buf)))...)
	if _, err := w.Write(buf); err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		return err
	}
	_, err := w.Write(make([]byte, pad4(len(data))))
	return err
}

func pad4(n int) int { return (4 - n%4) % 4 }
