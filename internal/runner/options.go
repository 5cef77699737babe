package runner

// The bodies of the options every adapter has that need the adapters' own checks
// (the others are in internal/optcheck): each stores its value only when it passes,
// and otherwise returns the check's error (wrapping port.ErrInvalidSpec).

// SetOwner is WithOwner: owner, checked by ValidateOwner.
func SetOwner(dst *string, owner string) error {
	if err := ValidateOwner(owner); err != nil {
		return err
	}
	*dst = owner
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
