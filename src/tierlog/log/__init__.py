"""tierlog.log."""
