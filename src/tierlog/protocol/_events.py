"""What :meth:`ServerConnection.next_event` returns (h11's ``_events`` and sentinels)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["NEED_DATA", "ConnectionClosed", "RequestEvent"]


class _Sentinel(type):
    """h11's sentinel metaclass: ``type(NEED_DATA) is NEED_DATA``, and the repr is the name."""

    def __new__(
        cls, name: str, bases: tuple[type, ...], namespace: dict[str, Any], **kwds: Any
    ) -> _Sentinel:
        assert bases == (_Sentinel,)
        v = super().__new__(cls, name, bases, namespace, **kwds)
        v.__class__ = v  # type: ignore[assignment]
        return v

    def __repr__(self) -> str:
        return self.__name__


class NEED_DATA(_Sentinel, metaclass=_Sentinel):
    """No complete request is buffered: call ``receive_data`` with more bytes."""


@dataclass(frozen=True, slots=True)
class ConnectionClosed:
    """The client closed its side (``receive_data(b"")``) and every request was returned."""


@dataclass(frozen=True, slots=True)
class RequestEvent:
    """One parsed request.

    Attributes:
        api_key: the request's API key (:class:`tierlog.protocol.ApiKey`).
        api_version: the request's version.
        correlation_id: echoed in the response header by the codec.
        client_id: the header's client id (None when the client sent null).
        request: the kio request object (or a :mod:`tierlog.protocol._legacy` one when
            ``response`` is set); ``None`` only for an ApiVersions request of a version we
            do not know, whose body is not parsed.
        header: the kio ``RequestHeader`` (v1 or v2).
        seq: this connection's request number, from 0; responses leave in ``seq`` order.
        expects_response: False for acks=0 Produce: send nothing for it.
        size: the frame's length field (header and body bytes, without the 4-byte prefix).
        response: a response the codec already built (ApiVersions of an unknown version;
            versions advertised below :func:`implemented_min`): send it as it is, without
            calling a handler.
    """

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    request: Any
    header: Any
    seq: int
    expects_response: bool
    size: int
    response: Any = None


# The frozen dataclass __init__ goes through object.__setattr__ once per field (~0.75 µs for
# ten fields); the codec builds events on the hot path with the slot descriptors directly
# (~0.4 µs). Same object, same immutability for everyone else.
_SLOT_SETTERS = tuple(getattr(RequestEvent, name).__set__ for name in RequestEvent.__slots__)
_new = object.__new__


def make_request_event(
    api_key: int,
    api_version: int,
    correlation_id: int,
    client_id: str | None,
    request: Any,
    header: Any,
    seq: int,
    expects_response: bool,
    size: int,
    response: Any = None,
    _s: tuple[Any, ...] = _SLOT_SETTERS,
) -> RequestEvent:
    ev: RequestEvent = _new(RequestEvent)
    _s[0](ev, api_key)
    _s[1](ev, api_version)
    _s[2](ev, correlation_id)
    _s[3](ev, client_id)
    _s[4](ev, request)
    _s[5](ev, header)
    _s[6](ev, seq)
    _s[7](ev, expects_response)
    _s[8](ev, size)
    _s[9](ev, response)
    return ev


assert RequestEvent.__slots__ == (
    "api_key",
    "api_version",
    "correlation_id",
    "client_id",
    "request",
    "header",
    "seq",
    "expects_response",
    "size",
    "response",
)
