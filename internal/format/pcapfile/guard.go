package pcapfile

import (
	"errors"
	"runtime/debug"
	"unsafe"
)

// ErrChanged is the error when a mapped capture file shrinks while it is
// being read: reading a page past its new end would otherwise kill the
// process with SIGBUS.
var ErrChanged = errors.New("the capture file shrank while it was being read")

// Guard runs f, which may read r, and turns a fault on r's mapping into
// ErrChanged. Any other panic goes on.
func (r *Reader) Guard(f func()) (err error) {
	if r.mem == nil {
		f()
		return nil
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(r.mem)))
	hi := lo + uintptr(len(r.mem))
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if e := recover(); e != nil {
			// A memory fault's panic carries its address (SetPanicOnFault).
			if fe, ok := e.(interface{ Addr() uintptr }); ok && fe.Addr() >= lo && fe.Addr() < hi {
				err = ErrChanged
				return
			}
			panic(e)
		}
	}()
	f()
	return nil
}
