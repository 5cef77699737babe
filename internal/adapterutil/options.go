package adapterutil

import (
	"log/slog"
	"path/filepath"

	"github.com/agentsandbox/sandbox/port"
)

// The bodies of the options every adapter has: each checks its value, stores it in
// *dst only when it passes, and returns an error wrapping port.ErrInvalidSpec
// otherwise, worded the same in every adapter.

// SetOwner is WithOwner: owner, checked by ValidateOwner.
func SetOwner(dst *string, owner string) error {
	if err := ValidateOwner(owner); err != nil {
		return err
	}
	*dst = owner
	return nil
}

// SetLogger is WithLogger: l, not nil.
func SetLogger(dst **slog.Logger, l *slog.Logger) error {
	if l == nil {
		return port.Invalidf("logger is nil")
	}
	*dst = l
	return nil
}

// SetBridge is WithBridge: path, checked by ValidateBridge.
func SetBridge(dst *string, path string) error {
	if err := ValidateBridge(path); err != nil {
		return err
	}
	*dst = path
	return nil
}

// SetNotNil is an option whose value must not be nil: v, or the error msg.
func SetNotNil[T comparable](dst *T, v T, msg string) error {
	var none T
	if v == none {
		return port.Invalidf("%s", msg)
	}
	*dst = v
	return nil
}

// SetPositive is a size or duration option (what names it): n, above zero.
func SetPositive[N ~int | ~int64](dst *N, n N, what string) error {
	if n <= 0 {
		return port.Invalidf("%s %v is not positive", what, n)
	}
	*dst = n
	return nil
}

// SetCount is a count option (what names it) where zero means none: n, not negative.
func SetCount[N ~int | ~int64](dst *N, n N, what string) error {
	if n < 0 {
		return port.Invalidf("%s %d is negative", what, n)
	}
	*dst = n
	return nil
}

// SetAbsDir is a directory option (what names it): dir, absolute, cleaned.
func SetAbsDir(dst *string, dir, what string) error {
	if !filepath.IsAbs(dir) {
		return port.Invalidf("%s %q is not absolute", what, dir)
	}
	*dst = filepath.Clean(dir)
	return nil
}
