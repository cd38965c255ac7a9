"""tierlog.tiered."""
