//go:build !unix

package pcapfile

import "os"

func mapFile(*os.File) ([]byte, error) { return nil, nil }

func unmapFile([]byte) {}
