package checkpoint

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
)

// PutFile writes r to st under name and returns its reference: size and
// SHA-256, computed while writing. Set Local and Shared on the result as
// the caller needs.
func PutFile(ctx context.Context, st Storage, name string, r io.Reader) (FileRef, error) {
	h := sha256.New()
	cr := &countingReader{r: io.TeeReader(r, h)}
	if err := st.Put(ctx, name, cr); err != nil {
		return FileRef{}, err
	}
	return FileRef{Name: name, Size: cr.n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// GetVerified opens the file ref names. The reader checks size and SHA-256
// as it goes: reading past ref.Size, or reaching the end with another size
// or hash, fails with an error wrapping ErrCorrupt instead of io.EOF. So a
// caller must read to io.EOF before trusting the data.
func GetVerified(ctx context.Context, st Storage, ref FileRef) (io.ReadCloser, error) {
	rc, err := st.Get(ctx, ref.Name)
	if err != nil {
		return nil, err
	}
	return &verifyingReader{rc: rc, ref: ref, h: sha256.New()}, nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

type verifyingReader struct {
	rc  io.ReadCloser
	ref FileRef
	h   hash.Hash
	n   int64
	err error // sticky verdict once decided
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	n, err := v.rc.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	if v.n > v.ref.Size {
		v.err = fmt.Errorf("read %s: %w: more than the %d bytes expected", v.ref.Name, ErrCorrupt, v.ref.Size)
		return 0, v.err
	}
	if err == io.EOF {
		if v.n != v.ref.Size {
			v.err = fmt.Errorf("read %s: %w: %d bytes, expected %d", v.ref.Name, ErrCorrupt, v.n, v.ref.Size)
		} else if sum := hex.EncodeToString(v.h.Sum(nil)); sum != v.ref.SHA256 {
			v.err = fmt.Errorf("read %s: %w: sha256 %s, expected %s", v.ref.Name, ErrCorrupt, sum, v.ref.SHA256)
		} else {
			v.err = io.EOF
		}
		return n, v.err
	}
	if err != nil {
		return n, fmt.Errorf("read %s: %w", v.ref.Name, err)
	}
	return n, nil
}

func (v *verifyingReader) Close() error { return v.rc.Close() }

// ReadVerified reads the whole file ref names and checks it as GetVerified
// does.
func ReadVerified(ctx context.Context, st Storage, ref FileRef) ([]byte, error) {
	rc, err := GetVerified(ctx, st, ref)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}
