"""Session recordings: format, writer, reader and replay timeline, summaries and exports."""
