"""Talking HTTP to the server: streaming requests, SSE, the connection settings, redirects, open files."""
