//go:build !unix

package capture

import "os"

func mapFile(*os.File) ([]byte, error) { return nil, nil }

func unmapFile([]byte) {}
