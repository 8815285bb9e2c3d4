package table

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
)

// GLB binary forwarding-table format, version 2, as written by GLB's
// `glb-director-cli build-config` and read by its directors. All integers
// are little-endian; structures are packed.
const (
	glbMagic          = "GLBD"
	glbVersion        = 2
	GLBHeaderSize     = 4 + 5*4
	glbBackendSize    = 4 + 16 + 2 + 2
	glbBindSize       = 4 + 16 + 2 + 2 + 2 + 1 + 1
	glbRowSize        = 8
	GLBTableSize      = 4 + MaxBackends*glbBackendSize + 4 + MaxBinds*glbBindSize + 16 + Rows*glbRowSize
	glbFamilyIPv4     = 1
	glbFamilyIPv6     = 2
	glbStateFilling   = 0
	glbStateActive    = 1
	glbStateDrainInac = 2
)

// IsGLBBinary reports whether data starts like a GLB binary table.
func IsGLBBinary(data []byte) bool {
	return bytes.HasPrefix(data, []byte(glbMagic))
}

// WriteGLB writes tables in GLB's binary format.
func WriteGLB(w io.Writer, tables []*Table) error {
	gw := NewGLBWriter(w, len(tables))
	for _, t := range tables {
		if err := gw.Write(t); err != nil {
			return err
		}
	}
	return gw.Close()
}

// GLBWriter writes a GLB binary a table at a time, so that a writer of
// many tables needs only the one being written: a file of 1,024 tables
// is 525 MiB, and their rows as many again.
type GLBWriter struct {
	bw   *bufio.Writer
	n, i int
	buf  []byte // one table's bytes, reused
	err  error
}

// NewGLBWriter starts a GLB binary of n tables on w: its header, then
// each Write's table. Close says whether all n were written.
func NewGLBWriter(w io.Writer, n int) *GLBWriter {
	gw := &GLBWriter{bw: bufio.NewWriterSize(w, 1<<16), n: n, buf: make([]byte, GLBTableSize)}
	le := binary.LittleEndian
	var hdr [GLBHeaderSize]byte
	copy(hdr[:], glbMagic)
	le.PutUint32(hdr[4:], glbVersion)
	le.PutUint32(hdr[8:], uint32(n))
	le.PutUint32(hdr[12:], Rows)
	le.PutUint32(hdr[16:], MaxBackends)
	le.PutUint32(hdr[20:], MaxBinds)
	_, gw.err = gw.bw.Write(hdr[:])
	return gw
}

// Write writes the next table.
func (gw *GLBWriter) Write(t *Table) error {
	if gw.err != nil {
		return gw.err
	}
	if gw.i >= gw.n {
		return fmt.Errorf("tables[%d]: the file's header holds %d", gw.i, gw.n)
	}
	if len(t.Backends) > MaxBackends || len(t.Binds) > MaxBinds || len(t.Rows) != Rows {
		return fmt.Errorf("tables[%d]: does not fit GLB's format", gw.i)
	}
	clear(gw.buf)
	encodeGLBTable(gw.buf, t)
	gw.i++
	_, gw.err = gw.bw.Write(gw.buf)
	return gw.err
}

// Close flushes what was written, and fails if fewer tables were written
// than the header says.
func (gw *GLBWriter) Close() error {
	if gw.err != nil {
		return gw.err
	}
	if gw.i != gw.n {
		return fmt.Errorf("%d tables written; the file's header says %d", gw.i, gw.n)
	}
	return gw.bw.Flush()
}

// encodeGLBTable puts t in buf (GLBTableSize bytes, zero).
func encodeGLBTable(buf []byte, t *Table) {
	le := binary.LittleEndian
	p := buf
	le.PutUint32(p, uint32(len(t.Backends)))
	p = p[4:]
	for i := 0; i < MaxBackends; i++ {
		e := p[:glbBackendSize]
		p = p[glbBackendSize:]
		if i >= len(t.Backends) {
			continue
		}
		b := t.Backends[i]
		putAddr(e, b.IP)
		le.PutUint16(e[20:], glbState(b.State))
		if b.Healthy {
			le.PutUint16(e[22:], 1)
		}
	}
	le.PutUint32(p, uint32(len(t.Binds)))
	p = p[4:]
	for i := 0; i < MaxBinds; i++ {
		e := p[:glbBindSize]
		p = p[glbBindSize:]
		if i >= len(t.Binds) {
			continue
		}
		b := t.Binds[i]
		putAddr(e, b.Prefix.Addr())
		le.PutUint16(e[20:], uint16(b.Prefix.Bits()))
		le.PutUint16(e[22:], b.PortStart)
		le.PutUint16(e[24:], b.PortEnd)
		e[26] = byte(b.Proto)
	}
	copy(p, t.HashKey[:])
	p = p[16:]
	for _, r := range t.Rows {
		le.PutUint32(p, r.Primary)
		le.PutUint32(p[4:], r.Secondary)
		p = p[8:]
	}
}

func putAddr(e []byte, a netip.Addr) {
	if a.Is4() {
		binary.LittleEndian.PutUint32(e, glbFamilyIPv4)
		v := a.As4()
		copy(e[4:], v[:])
	} else {
		binary.LittleEndian.PutUint32(e, glbFamilyIPv6)
		v := a.As16()
		copy(e[4:], v[:])
	}
}

func glbState(s State) uint16 {
	switch s {
	case StateFilling:
		return glbStateFilling
	case StateActive:
		return glbStateActive
	}
	return glbStateDrainInac
}

// WriteGLBFile writes tables to path atomically: a temporary file in the
// same directory, synced, then renamed over path, so a reader sees the old
// file or the new one and never a partial one. It is mode 0600: it holds
// every table's hash_key.
func WriteGLBFile(path string, tables []*Table) error {
	return WriteFileAtomic(path, 0o600, func(w io.Writer) error { return WriteGLB(w, tables) })
}

// WriteFileAtomic writes path through a temporary file and a rename. It
// refuses a path that is a symbolic link or not a regular file: renaming
// over a link would replace it rather than write where it points, and
// writing through one, as root, where another user may place links, would
// write wherever that user chose.
func WriteFileAtomic(path string, mode os.FileMode, write func(io.Writer) error) (err error) {
	if err := CheckReplaceable(path); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err = write(f); err != nil {
		return err
	}
	if err = f.Chmod(mode); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// CheckReplaceable refuses a path to write a new file at that is a
// symbolic link or something other than a regular file (WriteFileAtomic).
func CheckReplaceable(path string) error {
	st, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return err
	case st.Mode()&os.ModeSymlink != 0:
		to, _ := os.Readlink(path)
		return fmt.Errorf("%s is a symbolic link (to %s): give the path of the file itself", path, to)
	case !st.Mode().IsRegular():
		return fmt.Errorf("%s exists and is not a regular file (%s)", path, st.Mode().Type())
	}
	return nil
}

// ReadGLB parses a GLB binary table file of at most MaxTables tables,
// checking every field so that a corrupt file is an error rather than a
// table that steers wrongly, and holding its tables to the rules a JSON
// config must follow, so that a table the JSON parser would refuse is not
// let in through the binary format.
func ReadGLB(data []byte) ([]*Table, error) { return ReadGLBLimit(data, ToolLimit) }

// ReadGLBLimit is ReadGLB for a reader that holds at most lim.Tables
// tables: a file with more is refused from its header, before any table
// is read.
func ReadGLBLimit(data []byte, lim Limit) ([]*Table, error) {
	le := binary.LittleEndian
	if len(data) < GLBHeaderSize || !IsGLBBinary(data) {
		return nil, errors.New("not a GLB binary table (no GLBD header)")
	}
	ver, n := le.Uint32(data[4:]), le.Uint32(data[8:])
	entries, maxBe, maxBi := le.Uint32(data[12:]), le.Uint32(data[16:]), le.Uint32(data[20:])
	if ver != glbVersion {
		return nil, fmt.Errorf("GLB table format version %d, only %d is supported", ver, glbVersion)
	}
	if entries != Rows || maxBe != MaxBackends || maxBi != MaxBinds {
		return nil, fmt.Errorf("GLB table geometry %d rows, %d backends, %d binds; want %d, %d, %d",
			entries, maxBe, maxBi, Rows, MaxBackends, MaxBinds)
	}
	if err := lim.Check(int64(n)); err != nil {
		return nil, err
	}
	body := data[GLBHeaderSize:]
	if uint64(len(body)) != uint64(n)*GLBTableSize {
		return nil, fmt.Errorf("GLB table file is %d bytes, want %d for %d tables",
			len(data), GLBHeaderSize+uint64(n)*GLBTableSize, n)
	}
	tables := make([]*Table, 0, n)
	var errs ErrorList
	for ti := 0; ti < int(n); ti++ {
		t, terrs := readGLBTable(body[ti*GLBTableSize:(ti+1)*GLBTableSize], ti)
		errs = append(errs, terrs...)
		tables = append(tables, t)
	}
	if len(errs) == 0 {
		binds := make([][]Bind, len(tables))
		for i, t := range tables {
			binds[i] = t.Binds
		}
		errs = CheckBindOverlapsAt(binds, nil)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return tables, nil
}

// readGLBTable reads tables[ti], whose bytes are p. Errors name the entry
// and its offset in the file. A structural problem (a count, family,
// state or row index out of range) ends the table's reading; the rules a
// config follows (unique backends and binds, ordered port ranges, at
// least one bind) are all reported.
func readGLBTable(p []byte, ti int) (*Table, ErrorList) {
	// A GLB binary carries no history settings: its tables have a JSON
	// config's defaults.
	r := &glbTableReader{p: p, ti: ti, base: GLBHeaderSize + ti*GLBTableSize, t: &Table{Rows: make([]Row, Rows), History: DefaultHistory()}}
	if r.backends() && r.binds() {
		r.rows()
	}
	return r.t, r.errs
}

// Where a GLB binary table's parts are, from its start.
const (
	glbBackendsAt  = 4
	glbBindCountAt = glbBackendsAt + MaxBackends*glbBackendSize
	glbBindsAt     = glbBindCountAt + 4
	glbKeyAt       = glbBindsAt + MaxBinds*glbBindSize
	glbRowsAt      = glbKeyAt + 16
)

// glbTableReader reads table ti of a GLB binary, p being its bytes. Each
// part's method reports whether the next can be read.
type glbTableReader struct {
	p    []byte
	ti   int
	base int // p's offset in the file, for the errors
	t    *Table
	errs ErrorList
}

func (r *glbTableReader) fail(off int, path, format string, args ...any) {
	path = fmt.Sprintf("tables[%d]", r.ti) + path
	r.errs = append(r.errs, &FieldError{Path: fmt.Sprintf("%s (byte %d)", path, r.base+off), Msg: fmt.Sprintf(format, args...)})
}

func (r *glbTableReader) backends() bool {
	le := binary.LittleEndian
	nb := le.Uint32(r.p)
	if nb == 0 || nb > MaxBackends {
		r.fail(0, ".backends", "backend count %d out of range 1-%d", nb, MaxBackends)
		return false
	}
	seen := map[netip.Addr]int{}
	for i := 0; i < int(nb); i++ {
		off := glbBackendsAt + i*glbBackendSize
		e := r.p[off : off+glbBackendSize]
		path := fmt.Sprintf(".backends[%d]", i)
		addr, err := getAddr(e)
		if err != nil {
			r.fail(off, path, "%v", err)
			return false
		}
		b := Backend{IP: addr}
		switch st := le.Uint16(e[20:]); st {
		case glbStateFilling:
			b.State = StateFilling
		case glbStateActive:
			b.State = StateActive
		case glbStateDrainInac:
			b.State = StateDrainingInactive
		default:
			r.fail(off+20, path, "state %d unknown", st)
			return false
		}
		switch h := le.Uint16(e[22:]); h {
		case 0, 1:
			b.Healthy = h == 1
		default:
			r.fail(off+22, path, "health %d unknown", h)
			return false
		}
		if j, dup := seen[addr.Unmap()]; dup {
			r.fail(off, path, "address %s is also backends[%d]", addr, j)
		}
		seen[addr.Unmap()] = i
		r.t.Backends = append(r.t.Backends, b)
	}
	return true
}

func (r *glbTableReader) binds() bool {
	le := binary.LittleEndian
	nbind := le.Uint32(r.p[glbBindCountAt:])
	if nbind > MaxBinds {
		r.fail(glbBindCountAt, ".binds", "bind count %d more than %d", nbind, MaxBinds)
		return false
	}
	if nbind == 0 {
		r.fail(glbBindCountAt, ".binds", "bind count 0: a table needs at least one bind")
	}
	seen := map[Bind]int{}
	for i := 0; i < int(nbind); i++ {
		off := glbBindsAt + i*glbBindSize
		e := r.p[off : off+glbBindSize]
		path := fmt.Sprintf(".binds[%d]", i)
		addr, err := getAddr(e)
		if err != nil {
			r.fail(off, path, "%v", err)
			return false
		}
		bits := int(le.Uint16(e[20:]))
		if bits > addr.BitLen() {
			r.fail(off+20, path, "prefix length %d, longer than the %d bits of the address", bits, addr.BitLen())
			return false
		}
		b := Bind{Prefix: netip.PrefixFrom(addr, bits), PortStart: le.Uint16(e[22:]), PortEnd: le.Uint16(e[24:]), Proto: Proto(e[26])}
		if b.Proto != ProtoTCP && b.Proto != ProtoUDP {
			r.fail(off+26, path, "protocol %d unknown", e[26])
			return false
		}
		if b.PortStart > b.PortEnd {
			r.fail(off+22, path, "port_start %d is greater than port_end %d", b.PortStart, b.PortEnd)
		}
		if j, dup := seen[b]; dup {
			r.fail(off, path, "same bind as binds[%d]", j)
		}
		seen[b] = i
		r.t.Binds = append(r.t.Binds, b)
	}
	return true
}

func (r *glbTableReader) rows() {
	le := binary.LittleEndian
	copy(r.t.HashKey[:], r.p[glbKeyAt:glbRowsAt])
	nb := uint32(len(r.t.Backends))
	q := r.p[glbRowsAt:]
	for i := range r.t.Rows {
		row := Row{le.Uint32(q), le.Uint32(q[4:])}
		q = q[8:]
		if row.Primary >= nb || row.Secondary >= nb {
			r.fail(glbRowsAt+i*glbRowSize, fmt.Sprintf(".rows[%#x]", i), "names backend %d/%d of %d", row.Primary, row.Secondary, nb)
			return
		}
		r.t.Rows[i] = row
		// Judged as a built table is: a row whose primary is not good
		// sends new connections where they should not go.
		if !r.t.Backends[row.Primary].Good() {
			r.t.NoGoodRows++
		}
	}
}

func getAddr(e []byte) (netip.Addr, error) {
	switch f := binary.LittleEndian.Uint32(e); f {
	case glbFamilyIPv4:
		return netip.AddrFrom4([4]byte(e[4:8])), nil
	case glbFamilyIPv6:
		a := netip.AddrFrom16([16]byte(e[4:20]))
		if a.Is4In6() {
			return netip.Addr{}, fmt.Errorf("%s is an IPv4-mapped IPv6 address: GLB's table gives IPv4 as family %d", a, glbFamilyIPv4)
		}
		return a, nil
	default:
		return netip.Addr{}, fmt.Errorf("address family %d unknown", f)
	}
}
