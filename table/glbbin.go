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
	glbHeaderSize     = 4 + 5*4
	glbBackendSize    = 4 + 16 + 2 + 2
	glbBindSize       = 4 + 16 + 2 + 2 + 2 + 1 + 1
	glbRowSize        = 8
	glbTableSize      = 4 + MaxBackends*glbBackendSize + 4 + MaxBinds*glbBindSize + 16 + Rows*glbRowSize
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
	bw := bufio.NewWriterSize(w, 1<<16)
	le := binary.LittleEndian
	var hdr [glbHeaderSize]byte
	copy(hdr[:], glbMagic)
	le.PutUint32(hdr[4:], glbVersion)
	le.PutUint32(hdr[8:], uint32(len(tables)))
	le.PutUint32(hdr[12:], Rows)
	le.PutUint32(hdr[16:], MaxBackends)
	le.PutUint32(hdr[20:], MaxBinds)
	bw.Write(hdr[:])
	for ti, t := range tables {
		if len(t.Backends) > MaxBackends || len(t.Binds) > MaxBinds || len(t.Rows) != Rows {
			return fmt.Errorf("tables[%d]: does not fit GLB's format", ti)
		}
		buf := make([]byte, glbTableSize)
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
		if _, err := bw.Write(buf); err != nil {
			return err
		}
	}
	return bw.Flush()
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

// WriteFileAtomic writes path through a temporary file and a rename.
func WriteFileAtomic(path string, mode os.FileMode, write func(io.Writer) error) (err error) {
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

// ReadGLB parses a GLB binary table file, checking every field so that a
// corrupt file is an error rather than a table that steers wrongly.
func ReadGLB(data []byte) ([]*Table, error) {
	le := binary.LittleEndian
	if len(data) < glbHeaderSize || !IsGLBBinary(data) {
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
	body := data[glbHeaderSize:]
	if uint64(len(body)) != uint64(n)*glbTableSize {
		return nil, fmt.Errorf("GLB table file is %d bytes, want %d for %d tables",
			len(data), glbHeaderSize+uint64(n)*glbTableSize, n)
	}
	tables := make([]*Table, 0, n)
	for ti := 0; ti < int(n); ti++ {
		t, err := readGLBTable(body[ti*glbTableSize : (ti+1)*glbTableSize])
		if err != nil {
			return nil, fmt.Errorf("tables[%d]: %w", ti, err)
		}
		tables = append(tables, t)
	}
	return tables, nil
}

func readGLBTable(p []byte) (*Table, error) {
	le := binary.LittleEndian
	t := &Table{Rows: make([]Row, Rows)}
	nb := le.Uint32(p)
	p = p[4:]
	if nb == 0 || nb > MaxBackends {
		return nil, fmt.Errorf("backend count %d out of range 1-%d", nb, MaxBackends)
	}
	for i := 0; i < MaxBackends; i++ {
		e := p[:glbBackendSize]
		p = p[glbBackendSize:]
		if i >= int(nb) {
			continue
		}
		addr, err := getAddr(e)
		if err != nil {
			return nil, fmt.Errorf("backends[%d]: %w", i, err)
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
			return nil, fmt.Errorf("backends[%d]: state %d unknown", i, st)
		}
		switch h := le.Uint16(e[22:]); h {
		case 0, 1:
			b.Healthy = h == 1
		default:
			return nil, fmt.Errorf("backends[%d]: health %d unknown", i, h)
		}
		t.Backends = append(t.Backends, b)
	}
	nbind := le.Uint32(p)
	p = p[4:]
	if nbind > MaxBinds {
		return nil, fmt.Errorf("bind count %d more than %d", nbind, MaxBinds)
	}
	for i := 0; i < MaxBinds; i++ {
		e := p[:glbBindSize]
		p = p[glbBindSize:]
		if i >= int(nbind) {
			continue
		}
		addr, err := getAddr(e)
		if err != nil {
			return nil, fmt.Errorf("binds[%d]: %w", i, err)
		}
		bits := int(le.Uint16(e[20:]))
		if bits > addr.BitLen() {
			return nil, fmt.Errorf("binds[%d]: prefix length %d too long", i, bits)
		}
		b := Bind{Prefix: netip.PrefixFrom(addr, bits), PortStart: le.Uint16(e[22:]), PortEnd: le.Uint16(e[24:]), Proto: Proto(e[26])}
		if b.Proto != ProtoTCP && b.Proto != ProtoUDP {
			return nil, fmt.Errorf("binds[%d]: protocol %d unknown", i, e[26])
		}
		t.Binds = append(t.Binds, b)
	}
	copy(t.HashKey[:], p[:16])
	p = p[16:]
	for r := range t.Rows {
		row := Row{le.Uint32(p), le.Uint32(p[4:])}
		p = p[8:]
		if row.Primary >= nb || row.Secondary >= nb {
			return nil, fmt.Errorf("row %#x names backend %d/%d of %d", r, row.Primary, row.Secondary, nb)
		}
		t.Rows[r] = row
	}
	return t, nil
}

func getAddr(e []byte) (netip.Addr, error) {
	switch f := binary.LittleEndian.Uint32(e); f {
	case glbFamilyIPv4:
		return netip.AddrFrom4([4]byte(e[4:8])), nil
	case glbFamilyIPv6:
		return netip.AddrFrom16([16]byte(e[4:20])), nil
	default:
		return netip.Addr{}, fmt.Errorf("address family %d unknown", f)
	}
}
