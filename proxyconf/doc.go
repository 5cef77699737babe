// Package proxyconf holds what every LLM proxy adapter shares: the header policy (which
// client headers are stripped, which are injected, and the validation that keeps their
// values safe) and the renderers for proxy configurations (nginx per run).
package proxyconf
