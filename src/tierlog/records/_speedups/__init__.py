"""Optional compiled twins of pure-Python code (built by setup.py when a C compiler exists).

Never import these directly: the modules that use them choose once at import time, honour
``TIERLOG_NO_EXTENSIONS=1`` and fall back to their pure-Python reference on ``ImportError``.
"""
