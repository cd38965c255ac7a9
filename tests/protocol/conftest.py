"""kafka-python 3.0.12 uses importlib.resources.read_text, deprecated in 3.11: import it once
with that warning silenced (pytest turns warnings into errors), then the modules are cached."""

import warnings

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka.protocol.admin
    import kafka.protocol.consumer
    import kafka.protocol.metadata
    import kafka.protocol.parser
    import kafka.protocol.producer
    import kafka.record.memory_records  # noqa: F401
