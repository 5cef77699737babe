// Package nginxconf renders the configuration of the Docker adapter's per-run nginx
// proxy and reads its audit log back. The header policy it applies is proxypolicy's,
// shared with every other proxy front; what is nginx's alone (the template, the
// escaping that keeps substituted values inert, the audit log format and its bounded
// reader) lives here.
package nginxconf
