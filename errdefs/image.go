package errdefs

import "errors"

// Sentinels of image pulls (port.ImagePuller).
var (
	// ErrDigestMismatch reports an image whose content is not the digest the reference
	// pinned: the tag now names other content, or what arrived hashes differently.
	ErrDigestMismatch = errors.New("digest mismatch")
)
