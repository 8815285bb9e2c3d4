package loader

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/director/director/bpf"
)

// PinKind is which of the project's two programs a pin directory holds:
// both pin their program as "prog", so only their maps tell them apart.
type PinKind int

const (
	KindNone     PinKind = iota // nothing of either program
	KindDirector                // the director's pins
	KindBackend                 // the backend program's pins
)

func (k PinKind) String() string {
	switch k {
	case KindDirector:
		return "a director"
	case KindBackend:
		return "a backend program"
	}
	return "nothing"
}

// mapsOnlyOf are the map pins of one program that the other never has.
func mapsOnlyOf(k PinKind) []string {
	dir, be := pinnedMaps, mapNames[bpf.BackendPinned]()
	mine, other := dir, be
	if k == KindBackend {
		mine, other = be, dir
	}
	var out []string
	for _, n := range mine {
		if !slices.Contains(other, n) {
			out = append(out, n)
		}
	}
	return out
}

// PinnedKind says which program's pins dir holds: the one whose own map
// pins are there (any of them, so that pins damaged underneath are still
// told apart), KindNone when neither's are (or dir is missing).
func PinnedKind(dir string) PinKind {
	for _, k := range []PinKind{KindDirector, KindBackend} {
		for _, n := range mapsOnlyOf(k) {
			if _, err := os.Lstat(filepath.Join(dir, n)); err == nil {
				return k
			}
		}
	}
	return KindNone
}

// WrongKindError is what a command of one program gets for a pin
// directory of the other: nothing is done to it. It is an ErrNotLoaded
// (or ErrBackendNotLoaded) too, so that a command that tells "not loaded"
// apart goes on telling it, in these words.
type WrongKindError struct {
	Dir         string
	Want, Found PinKind
}

func (e *WrongKindError) Error() string {
	look := "'director status --bpffs " + e.Dir + "'"
	if e.Found == KindBackend {
		look = "'director backend status --backend-bpffs " + e.Dir + "'"
	}
	return fmt.Sprintf("%s: no %s is loaded here (%s is: %s), so nothing was done to it (check the pin directory flag)",
		e.Dir, kindNoun(e.Want), e.Found, look)
}

func kindNoun(k PinKind) string {
	if k == KindBackend {
		return "backend program"
	}
	return "director"
}

func (e *WrongKindError) Is(target error) bool {
	return (target == ErrNotLoaded && e.Want == KindDirector) || (target == ErrBackendNotLoaded && e.Want == KindBackend)
}

// ErrBackendNotLoaded is ErrNotLoaded for the backend program.
var ErrBackendNotLoaded = errors.New("no backend program is loaded there (run 'director backend attach')")

// checkKind refuses dir when it holds the other program's pins.
func checkKind(dir string, want PinKind) error {
	if found := PinnedKind(dir); found != KindNone && found != want {
		return &WrongKindError{Dir: dir, Want: want, Found: found}
	}
	return nil
}
