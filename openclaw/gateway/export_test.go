package gateway

// WithAfterWriteHook runs f on the writer goroutine after each request frame is
// written and before the write is reported, so tests can hold a write's outcome
// back until the connection has ended.
func WithAfterWriteHook(f func(*Client)) Option {
	return func(c *config) error {
		c.afterWrite = f
		return nil
	}
}
