"""Encryption of remote objects at rest: AES-256-GCM, envelope style, chunked so that a ranged
read still costs one ranged GET (sans-IO, apart from reading the key file).

Keys. The *master key* (256 bits) is the operator's: ``rsm.config.encryption.key.file`` (a
file holding the 32 bytes, raw or base64) or ``rsm.config.encryption.key`` (base64; meant to be
a config-provider reference such as ``${file:/etc/tierlog/secrets:remote.key}`` or
``${env:TIERLOG_REMOTE_KEY}``, so the key is never in ``server.properties``). Every segment gets
a fresh random 256-bit *data key*, wrapped with the master key and kept in the segment's
``.indexes`` object: a data key encrypts one segment only, so the chunk nonces below never
repeat under a key, and a master key can be replaced by re-wrapping data keys without
re-encrypting data.

The names follow Aiven's tiered-storage plugin (``rsm.config.encryption.enabled``, its key
material under ``rsm.config.encryption.*``): an operator coming from Aiven's plugin finds the
switch where they expect it. Aiven wraps data keys with RSA key pairs; a symmetric master key
is enough here (the broker both writes and reads; no party only writes) and keeps the key one
line of a secret store.

Objects (``P`` = the segment's object prefix, ``<topic>-<id>/<partition>/<offset>-<id>``, bound
into every tag so an object or a chunk moved to another name fails its check)::

    .indexes   magic b"TLIE" | version u16 = 1 | key id 8 | wrap nonce 12
               | wrapped data key 48 (32 + tag)  AAD: the 26 header bytes before it + P
               | body nonce 12 | body (the plain .indexes object: chunk index, flags) + tag
                                                  AAD: b"indexes:" + P
    .log       chunk i of the original bytes (zstd-compressed first with compression=zstd),
               encrypted with the data key, nonce = i as 12 big-endian bytes,
               AAD: b"log:" + P; ciphertext + 16-byte tag. The chunk index in the .indexes
               object gives each chunk's object range, so bytes [a, b] of the segment are one
               contiguous object range: one ranged GET, then one tag check per chunk.

The key id is the first 8 bytes of HMAC-SHA256(master key, b"tierlog remote key id"): a
reader holding another key says so ("encrypted with key id ..., the configured key is ...")
instead of only "tag mismatch". Any tag failure is a :class:`~tierlog.errors.RemoteDecryptionError`:
never garbage. An unencrypted object (written before encryption was turned on) stays readable.

Thread-safe: keys are immutable; AESGCM objects are made per call.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from tierlog.errors import ConfigError, RemoteDecryptionError

__all__ = [
    "ENCRYPTED_INDEXES_MAGIC",
    "TAG_SIZE",
    "MasterKey",
    "SegmentKey",
    "is_encrypted_indexes",
    "master_key_from_config",
]

ENCRYPTED_INDEXES_MAGIC = b"TLIE"
_VERSION = 1
_HEAD = struct.Struct(">4sH8s12s")  # magic, version, key id, wrap nonce
KEY_SIZE = 32
NONCE_SIZE = 12
TAG_SIZE = 16
_WRAPPED = KEY_SIZE + TAG_SIZE


def is_encrypted_indexes(data: bytes) -> bool:
    return data[:4] == ENCRYPTED_INDEXES_MAGIC


@dataclass(frozen=True, slots=True)
class SegmentKey:
    """A segment's data key (encrypts its chunks and its indexes body)."""

    key: bytes = field(repr=False)

    def encrypt_chunk(self, prefix: str, index: int, data: bytes) -> bytes:
        return AESGCM(self.key).encrypt(_chunk_nonce(index), data, b"log:" + prefix.encode())

    def decrypt_chunk(self, prefix: str, index: int, data: bytes | memoryview) -> bytes:
        """Raises: RemoteDecryptionError: the chunk fails its tag."""
        try:
            return AESGCM(self.key).decrypt(_chunk_nonce(index), data, b"log:" + prefix.encode())
        except InvalidTag:
            raise RemoteDecryptionError(
                f"{prefix}.log: chunk {index} fails its AES-GCM authentication tag (the object "
                "was changed, or does not belong to this .indexes object)"
            ) from None


def _chunk_nonce(index: int) -> bytes:
    return index.to_bytes(NONCE_SIZE, "big")


@dataclass(frozen=True, slots=True)
class MasterKey:
    """The operator's key: wraps and unwraps data keys, seals and opens ``.indexes``."""

    key: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if len(self.key) != KEY_SIZE:
            raise ValueError(f"an AES-256 key is {KEY_SIZE} bytes, not {len(self.key)}")

    @property
    def key_id(self) -> bytes:
        return hmac.new(self.key, b"tierlog remote key id", hashlib.sha256).digest()[:8]

    def new_segment_key(self) -> SegmentKey:
        return SegmentKey(AESGCM.generate_key(bit_length=256))

    def seal_indexes(self, prefix: str, segment_key: SegmentKey, plain: bytes) -> bytes:
        """The encrypted ``.indexes`` object for the plain one."""
        p = prefix.encode()
        head = _HEAD.pack(ENCRYPTED_INDEXES_MAGIC, _VERSION, self.key_id, os.urandom(NONCE_SIZE))
        wrapped = AESGCM(self.key).encrypt(head[-NONCE_SIZE:], segment_key.key, head + p)
        body_nonce = os.urandom(NONCE_SIZE)
        body = AESGCM(segment_key.key).encrypt(body_nonce, plain, b"indexes:" + p)
        return head + wrapped + body_nonce + body

    def open_indexes(self, prefix: str, data: bytes) -> tuple[SegmentKey, bytes]:
        """The segment key and the plain ``.indexes`` object.

        Raises:
            RemoteDecryptionError: another key wrote it, or a tag check failed (a changed or
                moved object), or it is truncated.
        """
        where = f"{prefix}.indexes"
        if len(data) < _HEAD.size + _WRAPPED + NONCE_SIZE + TAG_SIZE:
            raise RemoteDecryptionError(f"{where}: encrypted object truncated ({len(data)} bytes)")
        _magic, version, key_id, nonce = _HEAD.unpack_from(data)
        if version != _VERSION:
            raise RemoteDecryptionError(f"{where}: unsupported encryption version {version}")
        if key_id != self.key_id:
            raise RemoteDecryptionError(
                f"{where}: encrypted with another key (key id {key_id.hex()}; the configured "
                f"rsm.config.encryption key has id {self.key_id.hex()})"
            )
        p = prefix.encode()
        head = data[: _HEAD.size]
        wrapped = data[_HEAD.size : _HEAD.size + _WRAPPED]
        try:
            segment_key = AESGCM(self.key).decrypt(nonce, wrapped, head + p)
        except InvalidTag:
            raise RemoteDecryptionError(
                f"{where}: the wrapped data key fails its AES-GCM authentication tag (the "
                "object was changed or moved)"
            ) from None
        pos = _HEAD.size + _WRAPPED
        body_nonce, body = data[pos : pos + NONCE_SIZE], data[pos + NONCE_SIZE :]
        try:
            plain = AESGCM(segment_key).decrypt(body_nonce, body, b"indexes:" + p)
        except InvalidTag:
            raise RemoteDecryptionError(
                f"{where}: the indexes fail their AES-GCM authentication tag (the object was "
                "changed or moved)"
            ) from None
        return SegmentKey(segment_key), plain


def _decode_key(text: bytes, where: str, *, allow_raw: bool) -> bytes:
    if allow_raw and len(text) == KEY_SIZE:
        return text
    try:
        key = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) != KEY_SIZE:
        raise ConfigError(
            where,
            f"not an AES-256 key: expected {KEY_SIZE} bytes{', raw or' if allow_raw else ' in'} "
            "base64 "
            "(head -c 32 /dev/urandom | base64)",
        )
    return key


def master_key_from_config(
    configs: Mapping[str, str], prefix: str = "rsm.config."
) -> MasterKey | None:
    """The master key when ``encryption.enabled`` is true, else None.

    Raises:
        ConfigError: enabled without a key or with both; an unreadable key file; not 32
            bytes (raw or base64); a bad ``encryption.enabled`` value.
    """
    enabled = configs.get("encryption.enabled", "false").strip().lower()
    if enabled not in ("true", "false"):
        raise ConfigError(f"{prefix}encryption.enabled", f"{enabled!r} is not true or false")
    key_file, key_text = configs.get("encryption.key.file"), configs.get("encryption.key")
    if enabled == "false":
        if key_file is not None or key_text is not None:
            raise ConfigError(
                f"{prefix}encryption.enabled",
                "an encryption key is given but encryption is not enabled",
            )
        return None
    if key_file is not None and key_text is not None:
        raise ConfigError(
            f"{prefix}encryption.key", "give encryption.key or encryption.key.file, not both"
        )
    if key_file is not None:
        where = f"{prefix}encryption.key.file"
        try:
            raw = Path(key_file.strip()).read_bytes()
        except OSError as e:
            raise ConfigError(where, f"cannot read {key_file.strip()}: {e.strerror}") from None
        return MasterKey(_decode_key(raw, where, allow_raw=True))
    if key_text is not None:
        return MasterKey(_decode_key(key_text.encode(), f"{prefix}encryption.key", allow_raw=False))
    raise ConfigError(
        f"{prefix}encryption.key.file",
        "encryption is enabled: set encryption.key.file (or encryption.key, for example "
        "from a config provider)",
    )
