// Package countio counts the bytes that pass through a writer (a reader's, with
// io.TeeReader): an archive's size as it is written or checked, without buffering it.
package countio

import "io"

// Writer passes writes on to W and counts the bytes W took in N.
type Writer struct {
	W io.Writer
	N int64
}

// Write writes p to W and adds what W took to N.
func (c *Writer) Write(p []byte) (int, error) {
	n, err := c.W.Write(p)
	c.N += int64(n)
	return n, err
}
