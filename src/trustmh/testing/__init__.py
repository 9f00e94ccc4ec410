"""Test helpers for trustmh (fake LLM API server for tests and benchmarks)."""
