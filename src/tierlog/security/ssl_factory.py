"""TLS for one listener: an ``ssl.SSLContext`` from Kafka's ``ssl.*`` keys (Kafka's
``SslFactory`` and ``DefaultSslEngineFactory``).

Key store (the broker's key and certificate chain), by ``ssl.keystore.type``:

* ``PEM``: ``ssl.keystore.location`` is one file holding the private key and the certificate
  chain, or both are inline in ``ssl.keystore.key`` and ``ssl.keystore.certificate.chain``.
  An encrypted key takes ``ssl.key.password``; ``ssl.keystore.password`` is refused, as Kafka
  refuses it for PEM.
* ``PKCS12``: ``ssl.keystore.location`` with ``ssl.keystore.password`` (the key is taken with
  the same password, as Java's keytool writes it, or with ``ssl.key.password`` when that is
  the one that opens it).
* ``JKS`` (Kafka's default): a PKCS12 file is read as such, as Java 9+ reads it; a real JKS
  file is refused with the keytool command that converts it.

Trust store (the CAs client certificates must chain to), by ``ssl.truststore.type``: PEM
(``ssl.truststore.location`` or inline ``ssl.truststore.certificates``) or PKCS12 with
``ssl.truststore.password``. Without one, client certificates are checked against the system's
CAs (Kafka uses the JVM's).

``ssl.client.auth``: ``none`` (no certificate asked), ``requested`` (checked when the client
sends one) or ``required`` (mTLS: no certificate, no connection). ``ssl.enabled.protocols``
bounds the TLS versions (the range from the lowest listed to the highest);
``ssl.cipher.suites`` names TLS 1.2 suites by IANA name (Kafka's, from Java) or OpenSSL name.

Python's ``SSLContext.load_cert_chain`` reads files only. Key material that is not already a
file (inline PEM, a PKCS12 store turned into PEM) is written to a temporary file created with
mode 0600 in a private directory, loaded, and unlinked at once, so it is on disk for the
duration of one call.

Errors name the key: a wrong password or an unreadable store fails startup with one line.
Build once per listener at startup; the context is then shared by all its connections.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tierlog.errors import ConfigError
from tierlog.security.security_config import ListenerConfigs

__all__ = ["SslFactory"]

_JKS_MAGIC = b"\xfe\xed\xfe\xed"
_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}
# TLS 1.3 suites: the same names in IANA and OpenSSL; Python cannot narrow them (all stay on).
_TLS13_SUITES = frozenset(
    {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"}
)
_KX = {
    "ECDHE_RSA": "ECDHE-RSA-",
    "ECDHE_ECDSA": "ECDHE-ECDSA-",
    "DHE_RSA": "DHE-RSA-",
    "RSA": "",
}
_CIPHER = {
    "AES_128_GCM": "AES128-GCM",
    "AES_256_GCM": "AES256-GCM",
    "CHACHA20_POLY1305": "CHACHA20-POLY1305",
    "AES_128_CBC": "AES128",
    "AES_256_CBC": "AES256",
}


def openssl_cipher_name(name: str) -> str | None:
    """The OpenSSL name of a TLS 1.2 suite given by its IANA name
    (``TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`` → ``ECDHE-RSA-AES128-GCM-SHA256``); an OpenSSL
    name is returned as is; None for a TLS 1.3 suite."""
    if name in _TLS13_SUITES:
        return None
    if not name.startswith("TLS_") or "_WITH_" not in name:
        return name
    kx, _, rest = name[4:].partition("_WITH_")
    for cipher, short in _CIPHER.items():
        if rest.startswith(cipher + "_"):
            mac = rest[len(cipher) + 1 :]
            if kx not in _KX:
                return name
            if cipher.endswith("CBC") and mac == "SHA":
                mac = "SHA"
            if cipher == "CHACHA20_POLY1305" and mac == "SHA256":
                return f"{_KX[kx]}{short}"
            return f"{_KX[kx]}{short}-{mac}"
    return name


class SslFactory:
    """The server ``SSLContext`` of one listener.

    Args:
        listener: the listener's name (``SSL``, ``SASL_SSL``, ``EXTERNAL``...).
        configs: the broker's per-listener security view.
    """

    def __init__(self, listener: str, configs: ListenerConfigs) -> None:
        self.listener = listener
        self._configs = configs

    def _get(self, key: str) -> Any:
        return self._configs.get(self.listener, key)

    def _key(self, key: str) -> str:
        return self._configs.source(self.listener, key)

    def create_server_context(self) -> ssl.SSLContext:
        """A server context: key store loaded, trust store loaded, client auth and protocol
        versions set.

        Raises:
            ConfigError: a store missing, unreadable, of a type tierlog does not read, or whose
                password is wrong (naming the key).
        """
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        versions = sorted(_VERSIONS[v] for v in self._get("ssl.enabled.protocols"))
        if not versions:
            raise ConfigError(self._key("ssl.enabled.protocols"), "enables no TLS version")
        ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
        self._set_ciphers(ctx)
        self._load_keystore(ctx)
        client_auth = str(self._get("ssl.client.auth")).lower()
        ctx.verify_mode = _CLIENT_AUTH[client_auth]
        if client_auth != "none":
            self._load_truststore(ctx)
        return ctx

    def create_client_context(self) -> ssl.SSLContext:
        """A client context (a broker connecting to another, a client command): the trust
        store the server's certificate must chain to (the system's CAs without one), the key
        store when one is set (a client certificate for mTLS), protocol versions and suites,
        and the host name checked unless ``ssl.endpoint.identification.algorithm`` is empty.

        Raises:
            ConfigError: as :meth:`create_server_context`.
        """
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        versions = sorted(_VERSIONS[v] for v in self._get("ssl.enabled.protocols"))
        if not versions:
            raise ConfigError(self._key("ssl.enabled.protocols"), "enables no TLS version")
        ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
        self._set_ciphers(ctx)
        if any(self._get(k) is not None for k in ("ssl.keystore.location", "ssl.keystore.key")):
            self._load_keystore(ctx)
        algorithm = str(self._get("ssl.endpoint.identification.algorithm") or "").strip()
        ctx.check_hostname = algorithm.lower() == "https"
        ctx.verify_mode = ssl.CERT_REQUIRED
        if self._get("ssl.truststore.location") is None and (
            self._get("ssl.truststore.certificates") is None
        ):
            ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
        else:
            self._load_truststore(ctx)
        return ctx

    # ----------------------------------------------------------------- key store

    def _load_keystore(self, ctx: ssl.SSLContext) -> None:
        store_type = str(self._get("ssl.keystore.type")).upper()
        location = self._get("ssl.keystore.location")
        inline_key = self._get("ssl.keystore.key")
        inline_chain = self._get("ssl.keystore.certificate.chain")
        key_password = self._get("ssl.key.password")
        if store_type == "JKS":
            store_type = self._jks_as_pkcs12("ssl.keystore", location)
        if store_type == "PEM":
            if self._get("ssl.keystore.password") is not None:
                raise ConfigError(
                    self._key("ssl.keystore.password"),
                    "SSL key store password cannot be specified with PEM format, only key "
                    "password may be specified (ssl.key.password)",
                )
            if inline_key is not None or inline_chain is not None:
                if location is not None:
                    raise ConfigError(
                        self._key("ssl.keystore.key"),
                        "give either ssl.keystore.location or the inline ssl.keystore.key and "
                        "ssl.keystore.certificate.chain, not both",
                    )
                if inline_key is None or inline_chain is None:
                    missing = (
                        "ssl.keystore.key"
                        if inline_key is None
                        else ("ssl.keystore.certificate.chain")
                    )
                    raise ConfigError(
                        self._key(missing), f"listener {self.listener}: {missing} is not set"
                    )
                pem = _pem_text(inline_key).encode() + b"\n" + _pem_text(inline_chain).encode()
                self._check_pem_key(pem, key_password, "ssl.keystore.key")
                with _private_file(pem) as path:
                    self._load_cert_chain(ctx, path, key_password, "ssl.keystore.key")
                return
            if location is None:
                raise self._no_keystore()
            path = self._readable(location)
            self._check_pem_key(path.read_bytes(), key_password, "ssl.keystore.location")
            self._load_cert_chain(ctx, path, key_password, "ssl.key.password")
            return
        # PKCS12
        if location is None:
            raise self._no_keystore()
        pem = self._pkcs12_to_pem(self._readable(location))
        with _private_file(pem) as path:
            self._load_cert_chain(ctx, path, None, "ssl.keystore.password")

    def _check_pem_key(self, pem: bytes, password: Any, key_key: str) -> None:
        """Open the private key of a PEM key store first, so that a wrong or missing
        ``ssl.key.password`` is named as such (OpenSSL only says "PEM lib")."""
        from cryptography.hazmat.primitives import serialization

        start = pem.find(b"-----BEGIN ")
        while start >= 0 and b"PRIVATE KEY-----" not in pem[start : pem.find(b"\n", start)]:
            start = pem.find(b"-----BEGIN ", start + 1)
        if start < 0:
            raise ConfigError(
                self._key(key_key), f"listener {self.listener}: no PEM private key found"
            )
        try:
            serialization.load_pem_private_key(
                pem[start:], None if password is None else str(password).encode()
            )
        except TypeError:
            what = "is encrypted: set" if password is None else "is not encrypted: remove"
            raise ConfigError(
                self._key("ssl.key.password"),
                f"listener {self.listener}: the private key {what} ssl.key.password",
            ) from None
        except ValueError:
            if password is not None:
                raise ConfigError(
                    self._key("ssl.key.password"),
                    f"listener {self.listener}: wrong password for the private key",
                ) from None
            raise ConfigError(
                self._key(key_key), f"listener {self.listener}: the private key does not parse"
            ) from None

    def _jks_as_pkcs12(self, prefix: str, location: Any) -> str:
        """``JKS`` (Kafka's default type) naming a PKCS12 file is read as PKCS12, as Java 9+
        does (``keystore.type.compat``); a real JKS file is refused with the way out.

        Raises:
            ConfigError: the file is a JKS store.
        """
        if location is not None:
            try:
                with open(location, "rb") as f:
                    magic = f.read(4)
            except OSError:
                return "PKCS12"  # the read that follows names the missing file
            if magic == _JKS_MAGIC:
                raise ConfigError(
                    self._key(f"{prefix}.type"),
                    f"listener {self.listener}: {location} is a JKS store, which tierlog cannot "
                    "read; convert it: keytool -importkeystore -srckeystore "
                    f"{location} -destkeystore store.p12 -deststoretype pkcs12",
                )
        return "PKCS12"

    def _no_keystore(self) -> ConfigError:
        return ConfigError(
            self._key("ssl.keystore.location"),
            f"listener {self.listener} uses TLS and needs a key store: ssl.keystore.location "
            f"(or listener.name.{self.listener.lower()}.ssl.keystore.location)",
        )

    def _readable(self, location: str) -> Path:
        path = Path(location)
        try:
            with open(path, "rb"):
                pass
        except OSError as e:
            key = "ssl.keystore.location"
            raise ConfigError(self._key(key), f"cannot read {location}: {e.strerror}") from None
        return path

    def _load_cert_chain(
        self, ctx: ssl.SSLContext, path: Path, password: Any, password_key: str
    ) -> None:
        try:
            ctx.load_cert_chain(str(path), password=None if password is None else str(password))
        except ssl.SSLError as e:
            reason = getattr(e, "reason", None) or str(e)
            if reason in ("BAD_DECRYPT", "bad decrypt") or "decrypt" in str(e).lower():
                raise ConfigError(
                    self._key(password_key),
                    f"listener {self.listener}: wrong password for the private key",
                ) from None
            raise ConfigError(
                self._key("ssl.keystore.location"),
                f"listener {self.listener}: the key store holds no usable private key and "
                f"certificate chain ({reason})",
            ) from None
        except OSError as e:
            raise ConfigError(
                self._key("ssl.keystore.location"), f"cannot load the key store: {e}"
            ) from None

    def _pkcs12_to_pem(self, path: Path) -> bytes:
        """The key and chain of a PKCS12 key store as one PEM text (key unencrypted: it goes
        into a 0600 file that is unlinked right after loading)."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.serialization import pkcs12

        data = path.read_bytes()
        store_password = self._get("ssl.keystore.password")
        candidates = [store_password, self._get("ssl.key.password")]
        loaded: Any = None
        for pw in dict.fromkeys(candidates):
            try:
                loaded = pkcs12.load_key_and_certificates(
                    data, None if pw is None else str(pw).encode()
                )
                break
            except ValueError:
                continue
        if loaded is None:
            raise ConfigError(
                self._key("ssl.keystore.password"),
                f"listener {self.listener}: cannot open the PKCS12 key store {path}: "
                "wrong password or not a PKCS12 file",
            )
        key, cert, extra = loaded
        if key is None or cert is None:
            raise ConfigError(
                self._key("ssl.keystore.location"),
                f"listener {self.listener}: the PKCS12 key store {path} holds no private key "
                "with its certificate",
            )
        parts = [
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
            cert.public_bytes(serialization.Encoding.PEM),
        ]
        parts += [c.public_bytes(serialization.Encoding.PEM) for c in extra]
        return b"".join(parts)

    # ----------------------------------------------------------------- trust store

    def _load_truststore(self, ctx: ssl.SSLContext) -> None:
        store_type = str(self._get("ssl.truststore.type")).upper()
        location = self._get("ssl.truststore.location")
        inline = self._get("ssl.truststore.certificates")
        if location is None and inline is None:
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
            return
        key = "ssl.truststore.location" if location is not None else "ssl.truststore.certificates"
        if store_type == "JKS" and inline is None:
            store_type = self._jks_as_pkcs12("ssl.truststore", location)
        try:
            if inline is not None:
                ctx.load_verify_locations(cadata=_pem_text(inline))
            elif store_type == "PEM":
                ctx.load_verify_locations(cafile=str(location))
            else:
                ctx.load_verify_locations(cadata=self._pkcs12_certificates(Path(location)))
        except ConfigError:
            raise
        except FileNotFoundError as e:
            raise ConfigError(self._key(key), f"cannot read {location}: {e.strerror}") from None
        except (ssl.SSLError, ValueError) as e:
            raise ConfigError(
                self._key(key), f"listener {self.listener}: no usable CA certificates ({e})"
            ) from None

    def truststore_pem(self) -> str:
        """The trust store's CA certificates as PEM text (for clients that take PEM only).

        Raises:
            ConfigError: an unreadable store or a wrong password.
        """
        inline = self._get("ssl.truststore.certificates")
        if inline is not None:
            return _pem_text(inline)
        location = self._get("ssl.truststore.location")
        if location is None:
            raise ConfigError(self._key("ssl.truststore.location"), "is not set")
        store_type = str(self._get("ssl.truststore.type")).upper()
        if store_type == "JKS":
            store_type = self._jks_as_pkcs12("ssl.truststore", location)
        try:
            if store_type == "PEM":
                return Path(location).read_text()
            return self._pkcs12_certificates(Path(location))
        except OSError as e:
            raise ConfigError(
                self._key("ssl.truststore.location"), f"cannot read {location}: {e.strerror}"
            ) from None

    def _pkcs12_certificates(self, path: Path) -> str:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.serialization import pkcs12

        password = self._get("ssl.truststore.password")
        try:
            store = pkcs12.load_pkcs12(
                path.read_bytes(), None if password is None else str(password).encode()
            )
        except ValueError:
            raise ConfigError(
                self._key("ssl.truststore.password"),
                f"listener {self.listener}: cannot open the PKCS12 trust store {path}: wrong "
                "password or not a PKCS12 file",
            ) from None
        certs = [c.certificate for c in store.additional_certs]
        if store.cert is not None:
            certs.append(store.cert.certificate)
        if not certs:
            raise ValueError(f"{path} holds no certificate")
        return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs)

    # ----------------------------------------------------------------- ciphers

    def _set_ciphers(self, ctx: ssl.SSLContext) -> None:
        suites = tuple(self._get("ssl.cipher.suites"))
        if not suites:
            return
        names = [n for n in (openssl_cipher_name(s) for s in suites) if n is not None]
        if not names:
            return  # only TLS 1.3 suites: those are on
        try:
            ctx.set_ciphers(":".join(names))
        except ssl.SSLError:
            raise ConfigError(
                self._key("ssl.cipher.suites"),
                f"no cipher suite usable among {', '.join(suites)}",
            ) from None


def _pem_text(value: Any) -> str:
    """Inline PEM from a properties file: Kafka allows the newlines to be written as spaces
    between the BEGIN and END lines; restore them."""
    text = str(value).strip()
    if "\n" in text:
        return text
    out: list[str] = []
    rest = text
    while "-----BEGIN " in rest:
        start = rest.index("-----BEGIN ")
        head_end = rest.index("-----", start + 11) + 5
        label = rest[start + 11 : head_end - 5]
        end_marker = f"-----END {label}-----"
        end = rest.index(end_marker, head_end)
        body = rest[head_end:end].split()
        out.append("\n".join([rest[start:head_end], *body, end_marker]))
        rest = rest[end + len(end_marker) :]
    return "\n".join(out) + "\n" if out else text


@contextlib.contextmanager
def _private_file(data: bytes) -> Iterator[Path]:
    """``data`` in a 0600 file in a 0700 directory, unlinked when the block ends: for
    ``load_cert_chain``, which takes file names only."""
    with tempfile.TemporaryDirectory(prefix="tierlog-tls-") as d:
        path = Path(d) / "key.pem"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            yield path
        finally:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
