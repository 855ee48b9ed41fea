"""Session recordings: format, writer, reader and replay timeline, exports."""
