"""The Textual app and the `rampwatch` command line."""
