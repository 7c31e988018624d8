package file

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// DefaultMaxBytes is the default cap on a services file's size (max_bytes):
// about 36,000 services of three endpoints. Parsing YAML costs some 60
// times the file's size in memory (a 5,000-service, 1.1 MB file: 80 MiB
// allocated, 0.3 s; a 67 MB one: 4.6 GiB and 22 s), so the cap is what
// keeps a runaway file from taking the process down.
const DefaultMaxBytes = 8 << 20

// readChunk is how much is read between looks at the context.
const readChunk = 1 << 20

// readFile reads the regular file at path (symlinks followed), at most
// max bytes, observing ctx between chunks. A FIFO, device, socket or
// directory is refused without being read (and a FIFO without blocking on
// its open); a file over max is refused after reading max+1 bytes.
func readFile(ctx context.Context, path string, max int64) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if err := regular(path, fi); err != nil {
		return nil, err
	}
	// O_NONBLOCK: should path become a FIFO between the Stat and the open,
	// the open does not wait for a writer; the Stat of the open file below
	// refuses it.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, err
	}
	if err := regular(path, fi); err != nil {
		return nil, err
	}
	if fi.Size() > max {
		return nil, tooLarge(path, max)
	}
	size := fi.Size() + 1 // one more, to see EOF (or growth) without growing the buffer
	if size > max+1 {
		size = max + 1
	}
	buf := make([]byte, 0, size)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if int64(len(buf)) > max {
			return nil, tooLarge(path, max)
		}
		if len(buf) == cap(buf) {
			grow := int64(cap(buf)) // the file grew after the Stat
			if grow < readChunk {
				grow = readChunk
			}
			if n := max + 1 - int64(len(buf)); grow > n {
				grow = n
			}
			buf = append(buf, make([]byte, grow)...)[:len(buf)]
		}
		end := len(buf) + readChunk
		if end > cap(buf) {
			end = cap(buf)
		}
		n, err := f.Read(buf[len(buf):end])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			if int64(len(buf)) > max {
				return nil, tooLarge(path, max)
			}
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func tooLarge(path string, max int64) error {
	return fmt.Errorf("%s: larger than max_bytes (%d bytes)", path, max)
}

// regular refuses anything but a regular file, naming what it is.
func regular(path string, fi fs.FileInfo) error {
	m := fi.Mode()
	if m.IsRegular() {
		return nil
	}
	kind := "not a regular file"
	switch {
	case m&fs.ModeNamedPipe != 0:
		kind = "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		kind = "a socket"
	case m&fs.ModeCharDevice != 0:
		kind = "a character device"
	case m&fs.ModeDevice != 0:
		kind = "a block device"
	case m.IsDir():
		kind = "a directory"
	}
	return fmt.Errorf("%s: is %s, not a regular file; only regular files are read", path, kind)
}
