"""tierlog: a Kafka-compatible streaming log with tiered storage (KIP-405), in Python."""

__version__ = "0.1.0"
__all__ = ["__version__"]
