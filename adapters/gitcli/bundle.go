package gitcli

import (
	"bufio"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/agentsandbox/sandbox/internal/countio"
	"github.com/agentsandbox/sandbox/port"
)

const (
	bundleHeader     = "# v2 git bundle\n"
	maxHeaderBytes   = 64 << 10
	maxBundleObjects = 1 << 20
)

// bundleInfo is what scanBundle learned from a bundle it accepted.
type bundleInfo struct {
	tip     string
	objects int
	bytes   int64 // inflated size of all objects (a delta counts its result)
}

// scanBundle checks a bundle before git reads it: a v2 header naming exactly
// refs/heads/branch and exactly the base as prerequisite, then a version 2 pack whose
// every object inflates to its declared size, no object over maxObject bytes and all
// of them together under maxTotal. Inflation is streamed and bounded, so a pack bomb is
// refused after reading at most one object's cap.
func scanBundle(r io.Reader, branch, base string, maxObject, maxTotal int64) (*bundleInfo, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	tip, err := scanBundleHeader(br, branch, base)
	if err != nil {
		return nil, err
	}
	info := bundleInfo{tip: tip}
	var hdr [12]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil || string(hdr[:4]) != "PACK" || binary.BigEndian.Uint32(hdr[4:8]) != 2 {
		return nil, rejectf(port.RuleLayout, "no version 2 pack")
	}
	n := binary.BigEndian.Uint32(hdr[8:])
	if n > maxBundleObjects {
		return nil, rejectf(port.RuleTotalSize, "%d objects", n)
	}
	info.objects = int(n)
	var zr io.ReadCloser
	for i := uint32(0); i < n; i++ {
		result, err := scanPackObject(br, &zr, i, maxObject)
		if err != nil {
			return nil, err
		}
		if info.bytes += result; info.bytes > maxTotal {
			return nil, &port.RejectError{Rule: port.RuleTotalSize, Detail: fmt.Sprintf("artefact objects exceed %d bytes", maxTotal)}
		}
	}
	var trailer [20]byte
	if _, err := io.ReadFull(br, trailer[:]); err != nil {
		return nil, rejectf(port.RuleLayout, "pack has no trailer")
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		return nil, rejectf(port.RuleLayout, "data after the pack")
	}
	return &info, nil
}

// rejectf is a refusal of the artefact under rule.
func rejectf(rule port.Rule, format string, args ...any) error {
	return &port.RejectError{Rule: rule, Detail: "artefact: " + fmt.Sprintf(format, args...)}
}

// scanBundleHeader reads a bundle's header: the v2 signature, exactly one ref
// (refs/heads/branch, whose id it returns) and exactly the base as prerequisite.
func scanBundleHeader(br *bufio.Reader, branch, base string) (tip string, err error) {
	var header int
	readLine := func() (string, error) {
		line, err := br.ReadString('\n')
		header += len(line)
		if err != nil || header > maxHeaderBytes {
			return "", rejectf(port.RuleLayout, "truncated or oversized bundle header")
		}
		return strings.TrimSuffix(line, "\n"), nil
	}
	first, err := readLine()
	if err != nil || first+"\n" != bundleHeader {
		return "", rejectf(port.RuleLayout, "not a v2 git bundle")
	}
	var prereqs, refs int
	for {
		line, err := readLine()
		if err != nil {
			return "", err
		}
		if line == "" {
			break
		}
		if rest, ok := strings.CutPrefix(line, "-"); ok {
			id, _, _ := strings.Cut(rest, " ")
			if id != base {
				return "", rejectf(port.RuleAncestry, "prerequisite %.40q is not the base", id)
			}
			prereqs++
			continue
		}
		id, ref, ok := strings.Cut(line, " ")
		if !ok || !isHex40(id) {
			return "", rejectf(port.RuleLayout, "malformed ref line")
		}
		if id == base || strings.Trim(id, "0") == "" {
			return "", rejectf(port.RuleBranch, "the branch tip is the base or the null id")
		}
		if ref != "refs/heads/"+branch {
			return "", &port.RejectError{Rule: port.RuleBranch, Path: ref, Detail: "artefact names a ref other than the expected branch"}
		}
		refs++
		tip = id
	}
	if refs != 1 || prereqs != 1 {
		return "", rejectf(port.RuleBranch, "%d refs and %d prerequisites, want 1 and 1", refs, prereqs)
	}
	return tip, nil
}

// scanPackObject checks pack object i: a known type, a declared size within
// maxObject (a delta's result too), and a zlib stream (*zr, reused across objects)
// that inflates to exactly that size and ends there. It returns the object's
// inflated size (a delta's result).
func scanPackObject(br *bufio.Reader, zr *io.ReadCloser, i uint32, maxObject int64) (int64, error) {
	typ, size, err := entryHeader(br)
	if err != nil {
		return 0, rejectf(port.RuleObject, "object %d: %v", i, err)
	}
	switch typ {
	case 1, 2, 3, 4: // commit, tree, blob, tag
	case 6: // ofs-delta: a varint offset
		for {
			b, err := br.ReadByte()
			if err != nil {
				return 0, rejectf(port.RuleObject, "object %d: truncated", i)
			}
			if b&0x80 == 0 {
				break
			}
		}
	case 7: // ref-delta: a base id
		if _, err := br.Discard(20); err != nil {
			return 0, rejectf(port.RuleObject, "object %d: truncated", i)
		}
	default:
		return 0, rejectf(port.RuleObject, "object %d has type %d", i, typ)
	}
	if size > uint64(maxObject) && typ < 6 {
		return 0, &port.RejectError{Rule: port.RuleFileSize, Detail: fmt.Sprintf("artefact object %d is %d bytes, over %d", i, size, maxObject)}
	}
	if *zr == nil {
		*zr, err = zlib.NewReader(br)
	} else {
		err = (*zr).(zlib.Resetter).Reset(br, nil)
	}
	if err != nil {
		return 0, rejectf(port.RuleObject, "object %d: %v", i, err)
	}
	// Read at most the declared size plus one byte: more is a lie, and a bomb.
	read := &countio.Writer{W: io.Discard}
	cr := io.TeeReader(io.LimitReader(*zr, int64(size)+1), read)
	var data io.Reader = cr
	result := int64(size)
	if typ >= 6 {
		// A delta starts with its base's size and its result's size.
		dbr := bufio.NewReader(cr)
		_, err1 := binary.ReadUvarint(dbr)
		rs, err2 := binary.ReadUvarint(dbr)
		if err1 != nil || err2 != nil {
			return 0, rejectf(port.RuleObject, "object %d: bad delta", i)
		}
		if rs > uint64(maxObject) {
			return 0, &port.RejectError{Rule: port.RuleFileSize, Detail: fmt.Sprintf("artefact object %d expands to %d bytes, over %d", i, rs, maxObject)}
		}
		result = int64(rs)
		data = dbr
	}
	if _, err := io.Copy(io.Discard, data); err != nil || read.N != int64(size) {
		return 0, rejectf(port.RuleObject, "object %d does not inflate to its declared size", i)
	}
	// The zlib stream must end exactly here (its checksum verified).
	if _, err := (*zr).Read(make([]byte, 1)); err != io.EOF {
		return 0, rejectf(port.RuleObject, "object %d does not inflate to its declared size", i)
	}
	return result, nil
}

// entryHeader reads a pack entry's type and size.
func entryHeader(br *bufio.Reader) (typ int, size uint64, err error) {
	b, err := br.ReadByte()
	if err != nil {
		return 0, 0, err
	}
	typ = int(b>>4) & 7
	size = uint64(b & 0x0f)
	shift := 4
	for b&0x80 != 0 {
		if shift > 60 {
			return 0, 0, errors.New("size overflows")
		}
		if b, err = br.ReadByte(); err != nil {
			return 0, 0, err
		}
		size |= uint64(b&0x7f) << shift
		shift += 7
	}
	return typ, size, nil
}

func isHex40(s string) bool {
	if len(s) != 40 {
		return false
	}
	return strings.Trim(s, "0123456789abcdef") == ""
}
