// Package proxypolicy holds the header policy every LLM proxy front shares: which client
// headers are stripped, which are injected, and the validation that keeps their values
// safe. Each front applies it its own way (the in-process proxy per request, the Docker
// adapter's nginx renderer in a configuration).
package proxypolicy
