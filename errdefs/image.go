package errdefs

import "errors"

// Sentinels of image pulls (port.ImagePuller).
var (
	// ErrDigestMismatch reports an image whose content is not the digest the reference
	// pinned: the tag now names other content, or what arrived hashes differently.
	ErrDigestMismatch = errors.New("digest mismatch")
)

// ErrImageNotFound reports a run's image that the runtime does not hold and, under
// its pull policy, does not pull: nothing was created. errors.Is(err, ErrNotFound)
// is true of it too. The error that wraps it names the image, the runtime's
// LoadImage and the pull policy.
var ErrImageNotFound error = &subError{msg: "image not found", parent: ErrNotFound}

// subError is a sentinel that also matches a broader one with errors.Is.
type subError struct {
	msg    string
	parent error
}

func (e *subError) Error() string { return e.msg }

// Is reports whether target is the broader sentinel.
func (e *subError) Is(target error) bool { return target == e.parent }
