package optcheck

// Apply runs opts on c in order, skipping nil ones (a caller's conditional option
// left unset), and returns the first error, unwrapped: the constructor names
// itself around it.
func Apply[C any, O ~func(*C) error](c *C, opts []O) error {
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(c); err != nil {
			return err
		}
	}
	return nil
}
