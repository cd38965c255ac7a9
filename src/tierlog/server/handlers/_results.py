"""Per-resource errors of the admin APIs: one resource's failure is answered in its own
result while the others go on (Kafka's ``ApiError.fromThrowable`` per resource)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from tierlog.errors import ApiError, ConfigError, InvalidConfig, KafkaStorageError

log = logging.getLogger(__name__)


def error_of(e: Exception) -> tuple[int, str]:
    """(error code, message) of a resource's failure: a ConfigError is INVALID_CONFIG."""
    if isinstance(e, ConfigError):
        return InvalidConfig.error_code, str(e)
    if isinstance(e, ApiError):
        return e.error_code, e.message
    return -1, str(e)


@contextlib.contextmanager
def answered_per_resource(res: dict[str, Any], what: str) -> Iterator[None]:
    """Answer an error of one resource in its own result, the others going on: an ApiError or
    ConfigError with its code and message; an OSError (logged) as KAFKA_STORAGE_ERROR."""
    try:
        yield
    except (ApiError, ConfigError) as e:
        res["error_code"], res["error_message"] = error_of(e)
    except OSError as e:
        log.error("%s failed: %s", what, e)
        res["error_code"], res["error_message"] = KafkaStorageError.error_code, str(e)
