"""tierlog.protocol."""
