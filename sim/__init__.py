"""A vLLM-compatible simulated server: the embedded default and the fast test double."""
