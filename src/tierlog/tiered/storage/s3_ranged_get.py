"""Signed S3 GETs over ``http.client``: exactly ONE HTTP request per object or byte range read.

Why hand-written: pyarrow's S3 filesystem sends a HEAD before every object read to learn the
object's size (``ObjectInputFile::Init``), and its Python API takes only a path -- there is no
way to hand it a known size or to skip the HEAD. A cold remote read (indexes + one data range)
thus cost 2 HEAD + 2 GET instead of 2 requests. S3's GET already answers a ``Range`` request
with a 206 (or a 416 past the end), so reads need nothing but a GET signed with AWS Signature
Version 4 -- about a hundred lines, no new dependency. Writes, deletes and listings stay with
pyarrow.

Signing (https://docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html)::

    CanonicalRequest = GET \\n /bucket/key (URI-encoded, path style) \\n (no query) \\n
                       host:..\\n x-amz-content-sha256:..\\n x-amz-date:..\\n
                       [x-amz-security-token:..\\n] \\n signed header names \\n payload hash
    StringToSign     = AWS4-HMAC-SHA256 \\n date \\n <day>/<region>/s3/aws4_request \\n
                       hex(sha256(CanonicalRequest))
    Signature        = hex(HMAC(HMAC(HMAC(HMAC("AWS4"+secret, day), region), "s3"),
                       "aws4_request") applied to StringToSign)

Addressing: path style (``http://endpoint/bucket/key``) with an endpoint override (MinIO,
SeaweedFS, ...); virtual-hosted style (``https://bucket.s3.<region>.amazonaws.com/key``) on AWS.
Keep-alive connections are pooled (at most :data:`MAX_IDLE_PER_HOST` idle per host); a pooled
connection the server had closed is replaced once without counting as a retry; 5xx and
connection errors are retried with exponential backoff.

Thread-safe.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import os
import random
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, urlparse

from tierlog.errors import ConfigError, RemoteResourceNotFoundError, RemoteStorageError

#: sha256 of the empty payload of a GET.
EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
_RETRY_STATUSES = frozenset({500, 502, 503, 504})
MAX_IDLE_PER_HOST = 16
_STALE_CONNECTION_ERRORS = (
    http.client.RemoteDisconnected,
    http.client.CannotSendRequest,
    ConnectionResetError,
    BrokenPipeError,
)


@dataclass(frozen=True, slots=True)
class S3Credentials:
    access_key: str
    secret_key: str
    session_token: str | None = None

    @classmethod
    def from_environment(cls) -> S3Credentials | None:
        """``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``."""
        access, secret = (
            os.environ.get("AWS_ACCESS_KEY_ID"),
            os.environ.get("AWS_SECRET_ACCESS_KEY"),
        )
        if not access or not secret:
            return None
        return cls(access, secret, os.environ.get("AWS_SESSION_TOKEN") or None)


def _hmac(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def sign_v4(
    *,
    method: str,
    host: str,
    path: str,
    region: str,
    credentials: S3Credentials,
    amz_date: str,
    payload_hash: str = EMPTY_SHA256,
    extra_headers: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The headers (lower-case names) of a signed request without a query string: the
    signed ones plus ``authorization``. Pure function.

    ``path`` is already URI-encoded; ``amz_date`` is ``YYYYMMDDTHHMMSSZ`` (UTC);
    ``extra_headers`` (e.g. ``range``) are sent and signed too.
    """
    day = amz_date[:8]
    headers = {"host": host, "x-amz-content-sha256": payload_hash, "x-amz-date": amz_date}
    for name, value in (extra_headers or {}).items():
        headers[name.lower()] = value
    if credentials.session_token:
        headers["x-amz-security-token"] = credentials.session_token
    names = sorted(headers)
    canonical = "\n".join(
        [
            method,
            path,
            "",
            "".join(f"{n}:{headers[n].strip()}\n" for n in names),
            ";".join(names),
            payload_hash,
        ]
    )
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key = _hmac(_hmac(_hmac(_hmac(f"AWS4{credentials.secret_key}".encode(), day), region), "s3"),
                "aws4_request")  # fmt: skip
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={credentials.access_key}/{scope}, "
        f"SignedHeaders={';'.join(names)}, Signature={signature}"
    )
    return headers


class S3RangedGetClient:
    """GET whole objects or byte ranges from S3 with one signed request each.

    Args:
        endpoint: ``http(s)://host:port`` of an S3-compatible server (path-style requests);
            None for AWS (virtual-hosted style in ``region``).
        region: the signing region.
        credentials: static keys.
        connect_timeout, request_timeout: seconds.
        retry_attempts: tries per read for 5xx answers and connection errors.

    Raises:
        ConfigError: a malformed endpoint.
    """

    def __init__(
        self,
        *,
        endpoint: str | None,
        region: str,
        credentials: S3Credentials,
        connect_timeout: float = 5.0,
        request_timeout: float = 30.0,
        retry_attempts: int = 3,
    ) -> None:
        self._region = region
        self._credentials = credentials
        self._timeout = max(connect_timeout, request_timeout)
        self._attempts = max(1, retry_attempts)
        if endpoint:
            parsed = urlparse(endpoint if "://" in endpoint else f"https://{endpoint}")
            if parsed.scheme not in ("http", "https") or not parsed.hostname:
                raise ConfigError("s3.endpoint", f"expected http(s)://host:port, got {endpoint!r}")
            self._scheme = parsed.scheme
            self._host = parsed.hostname
            self._port = parsed.port or (443 if parsed.scheme == "https" else 80)
            self._path_style = True
        else:
            self._scheme, self._host, self._port = "https", "", 443
            self._path_style = False
        self._lock = threading.Lock()
        self._idle: dict[tuple[str, int], list[http.client.HTTPConnection]] = {}
        self._closed = False
        #: Requests sent (tests, benchmarks).
        self.requests = 0

    def _address(self, bucket: str, key: str) -> tuple[str, int, str, str]:
        """(connect host, port, Host header, URI-encoded path)."""
        encoded_key = quote(key, safe="/-_.~")
        if self._path_style:
            default = self._port == (443 if self._scheme == "https" else 80)
            host_header = self._host if default else f"{self._host}:{self._port}"
            return (
                self._host,
                self._port,
                host_header,
                f"/{quote(bucket, safe='-_.~')}/{encoded_key}",
            )
        host = f"{bucket}.s3.{self._region}.amazonaws.com"
        return host, 443, host, f"/{encoded_key}"

    def _take(self, host: str, port: int, fresh: bool) -> http.client.HTTPConnection:
        if not fresh:
            with self._lock:
                idle = self._idle.get((host, port))
                if idle:
                    return idle.pop()
        if self._scheme == "https":
            return http.client.HTTPSConnection(host, port, timeout=self._timeout)
        return http.client.HTTPConnection(host, port, timeout=self._timeout)

    def _give_back(self, host: str, port: int, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            idle = self._idle.setdefault((host, port), [])
            if not self._closed and len(idle) < MAX_IDLE_PER_HOST:
                idle.append(conn)
                return
        conn.close()

    def get(self, bucket: str, key: str, start: int | None = None, end: int | None = None) -> bytes:
        """Object bytes ``[start, end]`` (inclusive; to the end when ``end`` is None; the whole
        object when ``start`` is None) in ONE GET. A range starting past the end is empty.

        Raises:
            RemoteResourceNotFoundError: no such object (404).
            RemoteStorageError: any other failure, after retries.
        """
        host, port, host_header, path = self._address(bucket, key)
        what = f"GET s3://{bucket}/{key}"
        range_header = None
        if start is not None:
            range_header = f"bytes={start}-" if end is None else f"bytes={start}-{end}"
        last_error: str = ""
        for attempt in range(self._attempts):
            if attempt:
                time.sleep(min(2.0, 0.05 * 2**attempt) * random.uniform(0.8, 1.2))
            amz_date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            headers = sign_v4(
                method="GET", host=host_header, path=path, region=self._region,
                credentials=self._credentials, amz_date=amz_date,
                extra_headers=None if range_header is None else {"range": range_header},
            )  # fmt: skip
            try:
                status, body, reason = self._send(host, port, path, headers)
            except (OSError, http.client.HTTPException) as e:
                last_error = f"{type(e).__name__}: {e}"
                continue
            if status in (200, 206):
                if status == 200 and start is not None:
                    # The server ignored the Range header: cut the range out ourselves.
                    return body[start : None if end is None else end + 1]
                return body
            if status == 416:
                return b""
            if status == 404:
                raise RemoteResourceNotFoundError(f"{what}: not found: {_s3_error(body)}")
            last_error = f"HTTP {status} {reason}: {_s3_error(body)}"
            if status not in _RETRY_STATUSES:
                break
        raise RemoteStorageError(f"{what}: {last_error}")

    def _send(
        self, host: str, port: int, path: str, headers: dict[str, str]
    ) -> tuple[int, bytes, str]:
        for fresh in (False, True):
            conn = self._take(host, port, fresh)
            try:
                self.requests += 1
                conn.request("GET", path, headers=headers)
                resp = conn.getresponse()
                body = resp.read()
            except _STALE_CONNECTION_ERRORS:
                conn.close()
                if fresh:
                    raise
                continue  # a pooled connection the server had closed: once more, anew
            except BaseException:
                conn.close()
                raise
            if resp.will_close:
                conn.close()
            else:
                self._give_back(host, port, conn)
            return resp.status, body, resp.reason
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        """Close the idle connections (ones in use close when returned). Idempotent."""
        with self._lock:
            self._closed = True
            idle = [c for conns in self._idle.values() for c in conns]
            self._idle.clear()
        for conn in idle:
            conn.close()

    def __del__(self) -> None:
        self.close()


def _s3_error(body: bytes) -> str:
    """The ``<Code>`` of an S3 XML error body, or its first bytes."""
    text = body[:512].decode("utf-8", "replace")
    start = text.find("<Code>")
    if start >= 0:
        end = text.find("</Code>", start)
        if end > start:
            return text[start + 6 : end]
    return text.strip()[:200] or "(no body)"


__all__ = ["EMPTY_SHA256", "S3Credentials", "S3RangedGetClient", "sign_v4"]
