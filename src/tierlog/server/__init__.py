"""tierlog.server."""
