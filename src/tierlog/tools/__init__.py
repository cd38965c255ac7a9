"""Command-line tools behind ``tierlog``'s subcommands (``dump-log``, ...)."""
