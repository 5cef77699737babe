// Package optcheck is the body of the functional options (Option func(*config)
// error) the library's packages share: each checks its value, stores it only when
// it passes, and otherwise returns an error wrapping errdefs.ErrInvalidSpec, worded
// by the option. It imports only errdefs, so any package can use it.
package optcheck

import (
	"log/slog"
	"path/filepath"

	"github.com/agentsandbox/sandbox/errdefs"
)

// Set stores v in *dst when ok; otherwise it returns errdefs.Invalidf(format,
// args...) and leaves *dst as it was.
func Set[T any](dst *T, v T, ok bool, format string, args ...any) error {
	if !ok {
		return errdefs.Invalidf(format, args...)
	}
	*dst = v
	return nil
}

// NotNil is an option whose value must not be nil: v, or the error msg.
func NotNil[T comparable](dst *T, v T, msg string) error {
	var none T
	return Set(dst, v, v != none, "%s", msg)
}

// Logger is WithLogger: l, not nil.
func Logger(dst **slog.Logger, l *slog.Logger) error {
	return Set(dst, l, l != nil, "logger is nil")
}

// Positive is a size or duration option (what names it): n, above zero.
func Positive[N ~int | ~int64](dst *N, n N, what string) error {
	return Set(dst, n, n > 0, "%s %v is not positive", what, n)
}

// Count is a count option (what names it) where zero means none: n, not negative.
func Count[N ~int | ~int64](dst *N, n N, what string) error {
	return Set(dst, n, n >= 0, "%s %v is negative", what, n)
}

// AbsDir is a directory option (what names it): dir, absolute, cleaned.
func AbsDir(dst *string, dir, what string) error {
	return Set(dst, filepath.Clean(dir), filepath.IsAbs(dir), "%s %q is not absolute", what, dir)
}
