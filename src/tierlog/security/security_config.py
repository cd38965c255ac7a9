"""The listeners' security keys: TLS (``ssl.*``), SASL (``sasl.*``) and their per-listener
overrides, with Kafka's names, defaults and validation.

:data:`SECURITY_CONFIGS` joins the broker's config table (:mod:`tierlog.server.kafka_config`).
A key may also be given for one listener, Kafka's way::

    listener.name.sasl_ssl.ssl.keystore.location=/etc/tierlog/broker.p12
    listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256
    listener.name.sasl_plaintext.plain.sasl.jaas.config=\\
        org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="secret";

The listener name in the prefix is lowercase (Kafka's ``ListenerName.configPrefix``); the key
after it is any ``ssl.*`` or ``sasl.*`` key of the table, or ``<mechanism>.sasl.jaas.config``
(a broker reads JAAS only in that form: the JAAS module belongs to one mechanism). Each is
validated like the plain key. :class:`ListenerConfigs` answers "what is ``ssl.client.auth`` on
listener SSL": the prefixed value when set, else the broker-wide one.

Immutable once built; thread-safe.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from tierlog.errors import ConfigError
from tierlog.server.config_def import (
    BrokerConfigDef,
    at_least,
    define,
    ignored,
    one_of,
    parse_config_value,
)

__all__ = [
    "AUTHORIZER_CLASS_NAMES",
    "LISTENER_PREFIX",
    "SECURITY_CONFIGS",
    "SECURITY_PROTOCOLS",
    "SUPPORTED_SASL_MECHANISMS",
    "ListenerConfigs",
    "parse_listener_key",
    "parse_security_value",
    "security_default",
]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SUPPORTED_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
LISTENER_PREFIX = "listener.name."

_NO_JVM = "tierlog uses Python's ssl module (OpenSSL), not a JVM security provider"
_NO_KERBEROS = "tierlog has no GSSAPI (Kerberos) mechanism"
_NO_PLUGINS = "tierlog's mechanisms are built in (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)"


def _mapping_rules(v: Any) -> str | None:
    from tierlog.security.principal import SslPrincipalMapper

    try:
        SslPrincipalMapper(str(v))
    except ValueError as e:
        return str(e)
    return None


AUTHORIZER_CLASS_NAMES = (
    "kafka.security.authorizer.AclAuthorizer",
    "kafka.security.auth.SimpleAclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
)


def _authorizer_class(v: Any) -> str | None:
    if not v or str(v).strip() in AUTHORIZER_CLASS_NAMES:
        return None
    return f"tierlog's authorizer is built in: use one of {', '.join(AUTHORIZER_CLASS_NAMES)}"


def _super_users(v: Any) -> str | None:
    bad = [p for p in str(v or "").split(";") if p.strip() and ":" not in p.strip()[1:-1]]
    return f"{', '.join(bad)}: a principal is Type:name (User:admin)" if bad else None


def _endpoint_algorithm(v: Any) -> str | None:
    if not v or str(v).strip().lower() == "https":
        return None
    return "is https (check the peer's host name) or empty (no check)"


def _mechanisms(v: Any) -> str | None:
    bad = [m for m in v if not re.fullmatch(r"[A-Z0-9_-]{1,20}", m)]
    return f"{', '.join(bad)} is not a SASL mechanism name" if bad else None


# fmt: off
SECURITY_CONFIGS: tuple[BrokerConfigDef, ...] = (
    # --- TLS (Kafka's SslConfigs and BrokerSecurityConfigs)
    define("ssl.keystore.type", "string", "JKS", one_of("JKS", "PKCS12", "PEM"),
           "Format of the key store: PKCS12 or PEM. JKS, Kafka's default, reads PKCS12 files "
           "(as Java 9+ does); real JKS files must be converted to PKCS12 with keytool."),
    define("ssl.keystore.location", "string", None, None,
           "The key store file: PKCS12, or for PEM one file with the private key and the "
           "certificate chain."),
    define("ssl.keystore.password", "password", None, None,
           "Password of a PKCS12 key store (PEM key stores take ssl.key.password only)."),
    define("ssl.key.password", "password", None, None,
           "Password of the private key (an encrypted PEM key)."),
    define("ssl.keystore.key", "password", None, None,
           "The private key in PEM, inline (with ssl.keystore.certificate.chain, type PEM)."),
    define("ssl.keystore.certificate.chain", "password", None, None,
           "The certificate chain in PEM, inline (with ssl.keystore.key, type PEM)."),
    define("ssl.truststore.type", "string", "JKS", one_of("JKS", "PKCS12", "PEM"),
           "Format of the trust store: PKCS12 or PEM."),
    define("ssl.truststore.location", "string", None, None,
           "The trust store file: CA certificates clients' certificates must chain to."),
    define("ssl.truststore.password", "password", None, None,
           "Password of a PKCS12 trust store."),
    define("ssl.truststore.certificates", "password", None, None,
           "Trusted certificates in PEM, inline (type PEM)."),
    define("ssl.client.auth", "string", "none", one_of("none", "requested", "required"),
           "Client certificates: none, requested (checked when sent) or required (mTLS)."),
    define("ssl.enabled.protocols", "list", ("TLSv1.2", "TLSv1.3"),
           one_of("TLSv1.2", "TLSv1.3", case_sensitive=True),
           "TLS versions accepted (the range from the lowest to the highest listed)."),
    define("ssl.protocol", "string", "TLSv1.3", one_of("TLS", "TLSv1.2", "TLSv1.3"),
           "Kafka's SSLContext protocol; the versions accepted come from ssl.enabled.protocols."),
    define("ssl.cipher.suites", "list", (), None,
           "TLS 1.2 cipher suites, by IANA (Kafka's) or OpenSSL name; empty: OpenSSL's "
           "defaults. TLS 1.3 suites cannot be narrowed from Python: all three stay on."),
    define("ssl.principal.mapping.rules", "string", "DEFAULT", _mapping_rules,
           "Rules mapping a client certificate's distinguished name to the principal name "
           "(RULE:pattern/replacement/[LU], DEFAULT)."),
    define("ssl.endpoint.identification.algorithm", "string", "https", _endpoint_algorithm,
           "https: a broker connecting to another broker (inter.broker.listener.name) checks "
           "the peer's host name against its certificate; empty: no check. A server does not "
           "check its clients' host names."),
    ignored("ssl.keymanager.algorithm", "string", "SunX509", None, _NO_JVM),
    ignored("ssl.trustmanager.algorithm", "string", "PKIX", None, _NO_JVM),
    ignored("ssl.secure.random.implementation", "string", None, None, _NO_JVM),
    ignored("ssl.provider", "string", None, None, _NO_JVM),
    ignored("ssl.engine.factory.class", "string", None, None, _NO_JVM),
    ignored("ssl.allow.dn.changes", "boolean", False, None, "no dynamic key store updates"),
    ignored("ssl.allow.san.changes", "boolean", False, None, "no dynamic key store updates"),
    # --- SASL
    define("sasl.enabled.mechanisms", "list", ("GSSAPI",), _mechanisms,
           "Mechanisms of SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (Kafka's default "
           "GSSAPI is not available: set this on every SASL listener)."),
    define("sasl.mechanism.inter.broker.protocol", "string", "GSSAPI", None,
           "Mechanism brokers use to each other (cluster mode)."),
    define("connections.max.reauth.ms", "long", 0, at_least(0),
           "KIP-368: a SASL session lasts at most this long; the client re-authenticates on "
           "the open connection, else the broker closes it. 0: sessions do not expire."),
    define("connection.failed.authentication.delay.ms", "int", 100, at_least(0),
           "How long the answer to a failed authentication (then the close) is held back, "
           "so a password storm does not spin; other connections are not delayed."),
    define("security.inter.broker.protocol", "string", "PLAINTEXT",
           one_of("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
           "Security protocol brokers use to each other (cluster mode)."),
    define("sasl.server.max.receive.size", "int", 524_288, at_least(1),
           "Largest request frame accepted before a SASL connection has authenticated."),
    # --- ACLs (Kafka's AclAuthorizer / StandardAuthorizer)
    define("authorizer.class.name", "string", "", _authorizer_class,
           "Turns ACLs on: kafka.security.authorizer.AclAuthorizer or "
           "org.apache.kafka.metadata.authorizer.StandardAuthorizer (both the same built-in "
           "authorizer); empty: no authorization, every request is allowed."),
    define("super.users", "string", "", _super_users,
           "Principals allowed everything, separated by semicolons: User:admin;User:ops."),
    define("allow.everyone.if.no.acl.found", "boolean", False, None,
           "The answer for a resource no ACL applies to (false: only super users)."),
    ignored("principal.builder.class", "string", None, None,
            "principals are built as Kafka's DefaultKafkaPrincipalBuilder does"),
    ignored("sasl.server.callback.handler.class", "string", None, None, _NO_PLUGINS),
    ignored("sasl.login.class", "string", None, None, _NO_PLUGINS),
    ignored("sasl.login.callback.handler.class", "string", None, None, _NO_PLUGINS),
    ignored("sasl.kerberos.service.name", "string", None, None, _NO_KERBEROS),
    ignored("sasl.kerberos.principal.to.local.rules", "list", ("DEFAULT",), None, _NO_KERBEROS),
    ignored("sasl.kerberos.kinit.cmd", "string", "/usr/bin/kinit", None, _NO_KERBEROS),
)
# fmt: on

_BY_NAME: dict[str, BrokerConfigDef] = {d.name: d for d in SECURITY_CONFIGS}
#: Keys a listener may override (listener.name.<l>.<key>).
_OVERRIDABLE = frozenset(n for n in _BY_NAME if n.startswith(("ssl.", "sasl.")))
_JAAS = BrokerConfigDef(
    "sasl.jaas.config", "password", None, "JAAS configuration of one mechanism on one listener."
)
_PREFIXED_RE = re.compile(r"^listener\.name\.([a-z0-9_]+)\.(.+)$")
_MECHANISM_JAAS_RE = re.compile(r"^([a-z0-9_-]+)\.sasl\.jaas\.config$")


def parse_security_value(key: str, raw: str, where: str | None = None) -> Any:
    """The typed value of an ``ssl.*`` or ``sasl.*`` key of the table, validated; ``where``
    is the name errors give (a client's ``kafka.ssl.truststore.location``).

    Raises:
        KeyError: ``key`` is not in the table.
        ConfigError: the value does not parse or validate.
    """
    return parse_config_value(_BY_NAME[key], raw, where or key)


def security_default(key: str) -> Any:
    """The default of a key of the table.

    Raises:
        KeyError: ``key`` is not in the table.
    """
    return _BY_NAME[key].default


def parse_listener_key(key: str, raw: str) -> tuple[str, str, Any]:
    """``(listener name, key, typed value)`` of a ``listener.name.<l>.<key>`` entry.

    The listener comes back uppercase (as in ``listeners``); ``key`` is the base key, or
    ``<MECHANISM>.sasl.jaas.config`` with the mechanism uppercased.

    Raises:
        ConfigError: not a prefixed security key, a listener name in uppercase, or a bad value.
    """
    m = _PREFIXED_RE.match(key)
    if m is None:
        if key.lower() != key and key.lower().startswith(LISTENER_PREFIX):
            raise ConfigError(key, "the listener name in a listener.name. key is lowercase")
        raise ConfigError(key, "expected listener.name.<listener>.<ssl.* or sasl.* key>")
    listener, rest = m.group(1), m.group(2)
    jaas = _MECHANISM_JAAS_RE.match(rest)
    if jaas is not None:
        mechanism = jaas.group(1).upper()
        return (
            listener.upper(),
            f"{mechanism}.sasl.jaas.config",
            parse_config_value(_JAAS, raw, key),
        )
    if rest == "sasl.jaas.config":
        raise ConfigError(
            key,
            f"a broker reads JAAS per mechanism: {LISTENER_PREFIX}{listener}.<mechanism>."
            "sasl.jaas.config (for example plain.sasl.jaas.config)",
        )
    d = _BY_NAME.get(rest)
    if d is None or rest not in _OVERRIDABLE:
        raise ConfigError(key, f"{rest!r} is not an ssl.* or sasl.* key a listener can override")
    return listener.upper(), rest, parse_config_value(d, raw, key)


def reject_unprefixed_jaas(key: str) -> None:
    """``sasl.jaas.config`` or ``<mechanism>.sasl.jaas.config`` without a listener prefix.

    Raises:
        ConfigError: always, with the form a broker reads.
    """
    raise ConfigError(
        key,
        "a broker reads JAAS per listener and mechanism: "
        "listener.name.<listener>.<mechanism>.sasl.jaas.config",
    )


class ListenerConfigs:
    """The security settings each listener sees: its ``listener.name.<l>.*`` value when set,
    else the broker-wide value (Kafka's ``ChannelBuilders`` view of ``valuesWithPrefixOverride``).

    Args:
        overrides: listener name (uppercase) → key → typed value, from :func:`parse_listener_key`.
        broker_value: the broker-wide typed value (or default) of a key.
        is_set: whether a broker-wide key was given (for :meth:`is_set`).
    """

    def __init__(
        self,
        overrides: Mapping[str, Mapping[str, Any]],
        broker_value: Callable[[str], Any],
        is_set: Callable[[str], bool],
    ) -> None:
        self._overrides = {k: dict(v) for k, v in overrides.items()}
        self._broker_value = broker_value
        self._is_set = is_set

    @property
    def listener_names(self) -> frozenset[str]:
        """Listeners named in at least one ``listener.name.`` key."""
        return frozenset(self._overrides)

    def get(self, listener: str, key: str) -> Any:
        """The typed value of ``key`` on ``listener``.

        Raises:
            KeyError: ``key`` is not a security key.
        """
        per = self._overrides.get(listener.upper(), {})
        if key in per:
            return per[key]
        return self._broker_value(key)

    def is_set(self, listener: str, key: str) -> bool:
        """Whether ``key`` was given for ``listener`` or broker-wide."""
        return key in self._overrides.get(listener.upper(), {}) or self._is_set(key)

    def source(self, listener: str, key: str) -> str:
        """The config key a value came from, for error messages."""
        if key in self._overrides.get(listener.upper(), {}):
            return f"{LISTENER_PREFIX}{listener.lower()}.{key}"
        return key

    def prefixed(self) -> list[tuple[str, BrokerConfigDef, Any]]:
        """Every ``listener.name.`` key given: (full key, its definition, typed value)."""
        out: list[tuple[str, BrokerConfigDef, Any]] = []
        for listener, values in sorted(self._overrides.items()):
            for key, value in sorted(values.items()):
                d = _BY_NAME.get(key, _JAAS)
                if key.endswith(".sasl.jaas.config"):
                    key = f"{key.split('.', 1)[0].lower()}.sasl.jaas.config"
                out.append((f"{LISTENER_PREFIX}{listener.lower()}.{key}", d, value))
        return out

    def jaas_config(self, listener: str, mechanism: str) -> str | None:
        """``listener.name.<l>.<mechanism>.sasl.jaas.config`` as given, or None."""
        value = self._overrides.get(listener.upper(), {}).get(f"{mechanism}.sasl.jaas.config")
        return None if value is None else str(value)

    def jaas_source(self, listener: str, mechanism: str) -> str:
        return f"{LISTENER_PREFIX}{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"

    def validate(self, listeners: Mapping[str, str]) -> None:
        """Cross-key checks once the listeners are known (name → security protocol).

        Raises:
            ConfigError: a prefix names no listener; a SASL listener enables a mechanism tierlog
                does not have, or none.
        """
        for name in self._overrides:
            if name not in listeners:
                raise ConfigError(
                    f"{LISTENER_PREFIX}{name.lower()}.*",
                    f"no listener is named {name} (listeners: {', '.join(sorted(listeners))})",
                )
        for name, protocol in listeners.items():
            if not protocol.startswith("SASL_"):
                continue
            mechanisms = tuple(self.get(name, "sasl.enabled.mechanisms"))
            where = self.source(name, "sasl.enabled.mechanisms")
            if not mechanisms:
                raise ConfigError(where, f"listener {name} ({protocol}) enables no mechanism")
            bad = [m for m in mechanisms if m not in SUPPORTED_SASL_MECHANISMS]
            if bad:
                raise ConfigError(
                    where,
                    f"listener {name} enables {', '.join(bad)}; tierlog supports "
                    f"{', '.join(SUPPORTED_SASL_MECHANISMS)} (set sasl.enabled.mechanisms or "
                    f"{LISTENER_PREFIX}{name.lower()}.sasl.enabled.mechanisms)",
                )
