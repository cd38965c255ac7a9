"""How a client connects: TLS or not, SASL or not, as whom (Kafka's client-side
``ChannelBuilders``). Used by a broker connecting to another broker, by the Spark source and by
the ``tierlog`` client commands.

Two ways to get one:

* :func:`inter_broker_security`: a broker's own identity on ``inter.broker.listener.name``,
  Kafka's way: the listener's security protocol; for SASL the mechanism
  ``sasl.mechanism.inter.broker.protocol`` (it must be one the listener enables) with the
  ``username`` and ``password`` options of that listener's JAAS entry for it::

      listener.name.replication.scram-sha-256.sasl.jaas.config=\\
          org.apache.kafka.common.security.scram.ScramLoginModule required \\
          username="broker" password="broker-secret";

  and for TLS the listener's ``ssl.*`` keys: its trust store checks the peer, its key store
  (when set) is the client certificate, ``ssl.endpoint.identification.algorithm=https`` (the
  default) checks the peer's host name.
* :func:`client_security`: a Kafka client's keys (``security.protocol``, ``sasl.mechanism``,
  ``sasl.jaas.config``, ``ssl.truststore.*``, ``ssl.keystore.*``, ...), as Spark's Kafka source
  takes them without their ``kafka.`` prefix.

Every check that can fail runs when it is built (a missing JAAS entry, an unreadable trust
store), with an error naming the key. Immutable; thread-safe (the ``SSLContext`` is shared by
the connections).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tierlog.errors import ConfigError
from tierlog.security.jaas_config import JaasConfigError, parse_jaas_config
from tierlog.security.sasl_client import CLIENT_MECHANISMS, SaslClient, new_sasl_client
from tierlog.security.security_config import (
    SECURITY_PROTOCOLS,
    ListenerConfigs,
    parse_security_value,
    security_default,
)
from tierlog.security.ssl_factory import SslFactory

if TYPE_CHECKING:
    from tierlog.server.kafka_config import KafkaConfig

__all__ = [
    "CLIENT_SECURITY_KEYS",
    "PLAINTEXT",
    "ClientSecurity",
    "client_security",
    "inter_broker_security",
    "librdkafka_config",
]


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """One client identity: the protocol, the SASL mechanism and credentials, the TLS
    context."""

    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ssl_context: ssl.SSLContext | None = field(default=None, compare=False)

    @property
    def uses_ssl(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    def new_sasl_client(self) -> SaslClient:
        """A fresh exchange (one per connection).

        Raises:
            RuntimeError: not a SASL protocol.
        """
        if not self.uses_sasl or self.sasl_mechanism is None:
            raise RuntimeError(f"{self.security_protocol} does not use SASL")
        return new_sasl_client(self.sasl_mechanism, self.username or "", self.password or "")

    def describe(self) -> str:
        """``SASL_SSL, SCRAM-SHA-256 as broker`` (for log lines; no secret)."""
        if self.uses_sasl:
            return f"{self.security_protocol}, {self.sasl_mechanism} as {self.username}"
        return self.security_protocol


PLAINTEXT = ClientSecurity()


def _jaas_credentials(jaas: str, key: str, mechanism: str) -> tuple[str, str]:
    try:
        entries = parse_jaas_config(jaas)
    except JaasConfigError as e:
        raise ConfigError(key, f"invalid JAAS configuration: {e}") from None
    options = entries[0].options
    username, password = options.get("username"), options.get("password")
    if not username or password is None:
        raise ConfigError(
            key,
            f"{mechanism} needs the client's username and password options "
            '(... required username="<user>" password="<password>";)',
        )
    return username, password


# ----------------------------------------------------------------- a broker's own identity


def inter_broker_security(config: KafkaConfig) -> ClientSecurity:
    """The identity a broker presents on ``inter.broker.listener.name``.

    Raises:
        ConfigError: a SASL mechanism the listener does not enable or tierlog does not have, no
            JAAS entry or no username/password in it, an unusable trust or key store.
    """
    listener = config.inter_broker_listener_name
    protocol = next(e.security_protocol for e in config.listeners if e.listener_name == listener)
    sec = config.listener_security
    ctx = None
    if protocol in ("SSL", "SASL_SSL"):
        ctx = SslFactory(listener, sec).create_client_context()
    if not protocol.startswith("SASL_"):
        return ClientSecurity(protocol, ssl_context=ctx)
    mechanism = str(config.get("sasl.mechanism.inter.broker.protocol"))
    if mechanism not in CLIENT_MECHANISMS:
        raise ConfigError(
            "sasl.mechanism.inter.broker.protocol",
            f"{mechanism} is not supported: inter-broker listener {listener} is {protocol}; "
            f"use one of {', '.join(CLIENT_MECHANISMS)}",
        )
    enabled = tuple(sec.get(listener, "sasl.enabled.mechanisms"))
    if mechanism not in enabled:
        raise ConfigError(
            "sasl.mechanism.inter.broker.protocol",
            f"{mechanism} must be enabled on the inter-broker listener {listener} "
            f"({sec.source(listener, 'sasl.enabled.mechanisms')} is {','.join(enabled)})",
        )
    key = sec.jaas_source(listener, mechanism)
    jaas = sec.jaas_config(listener, mechanism)
    if jaas is None:
        raise ConfigError(
            key,
            f"the broker authenticates to other brokers with {mechanism} on {listener}: "
            'set its username and password here (... required username="<user>" '
            'password="<password>";)',
        )
    username, password = _jaas_credentials(jaas, key, mechanism)
    return ClientSecurity(protocol, mechanism, username, password, ctx)


# ----------------------------------------------------------------- a Kafka client's keys

_CLIENT_SSL_KEYS = (
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.password",
    "ssl.key.password",
    "ssl.keystore.key",
    "ssl.keystore.certificate.chain",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.password",
    "ssl.truststore.certificates",
    "ssl.enabled.protocols",
    "ssl.protocol",
    "ssl.cipher.suites",
    "ssl.endpoint.identification.algorithm",
)
_CLIENT_SASL_KEYS = ("sasl.mechanism", "sasl.jaas.config")
#: The Kafka client keys :func:`client_security` reads (Spark's ``kafka.<key>`` options).
CLIENT_SECURITY_KEYS = frozenset(("security.protocol", *_CLIENT_SASL_KEYS, *_CLIENT_SSL_KEYS))
#: Java client keys that change nothing here (JVM plumbing, Kerberos, OAuth callbacks).
_CLIENT_IGNORED_PREFIXES = (
    "ssl.keymanager.",
    "ssl.trustmanager.",
    "ssl.secure.random.",
    "ssl.provider",
    "ssl.engine.",
    "sasl.kerberos.",
    "sasl.login.",
    "sasl.client.callback.",
)
_CLIENT = "CLIENT"


class _ClientConfigs(ListenerConfigs):
    """A client's ``ssl.*`` keys seen as one listener's, errors naming the client's keys."""

    def __init__(self, values: Mapping[str, Any], prefix: str) -> None:
        super().__init__({_CLIENT: values}, security_default, lambda _k: False)
        self._prefix = prefix
        self._given = frozenset(values)

    def source(self, listener: str, key: str) -> str:
        return f"{self._prefix}{key}"

    def is_set(self, listener: str, key: str) -> bool:
        return key in self._given


def client_security(configs: Mapping[str, str], prefix: str = "") -> ClientSecurity:
    """The security of a Kafka client from its keys (``prefix`` stripped already; it only
    names the keys in errors: ``kafka.`` for Spark's options).

    Raises:
        ConfigError: an unknown ``security.*``, ``ssl.*`` or ``sasl.*`` key; an unknown
            protocol or mechanism; SASL without ``sasl.jaas.config`` credentials; an unusable
            trust or key store.
    """
    protocol = str(configs.get("security.protocol", "PLAINTEXT")).strip().upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ConfigError(
            f"{prefix}security.protocol",
            f"{protocol} is not one of {', '.join(SECURITY_PROTOCOLS)}",
        )
    ssl_values: dict[str, Any] = {}
    for key, raw in configs.items():
        if not key.startswith(("ssl.", "sasl.", "security.")):
            continue
        if key == "security.protocol" or key in _CLIENT_SASL_KEYS:
            continue
        if key in _CLIENT_SSL_KEYS:
            ssl_values[key] = parse_security_value(key, str(raw), f"{prefix}{key}")
        elif not key.startswith(_CLIENT_IGNORED_PREFIXES):
            raise ConfigError(f"{prefix}{key}", "is not a security setting tierlog's client has")
    ctx = None
    if protocol in ("SSL", "SASL_SSL"):
        ctx = SslFactory(_CLIENT, _ClientConfigs(ssl_values, prefix)).create_client_context()
    if not protocol.startswith("SASL_"):
        return ClientSecurity(protocol, ssl_context=ctx)
    mechanism = str(configs.get("sasl.mechanism", "GSSAPI")).strip().upper()
    if mechanism not in CLIENT_MECHANISMS:
        raise ConfigError(
            f"{prefix}sasl.mechanism",
            f"{mechanism} is not supported; use one of {', '.join(CLIENT_MECHANISMS)}",
        )
    jaas = configs.get("sasl.jaas.config")
    key = f"{prefix}sasl.jaas.config"
    if jaas is None:
        raise ConfigError(
            key,
            f"{protocol} with {mechanism} needs the user's credentials: "
            f'{mechanism_login_module(mechanism)} required username="<user>" '
            'password="<password>";',
        )
    username, password = _jaas_credentials(str(jaas), key, mechanism)
    return ClientSecurity(protocol, mechanism, username, password, ctx)


def mechanism_login_module(mechanism: str) -> str:
    """Kafka's login module class for ``mechanism`` (for messages)."""
    if mechanism == "PLAIN":
        return "org.apache.kafka.common.security.plain.PlainLoginModule"
    return "org.apache.kafka.common.security.scram.ScramLoginModule"


# ----------------------------------------------------------------- librdkafka's names

#: Java client keys librdkafka does not have: their presence means "Java names, translate".
_JAVA_ONLY = frozenset(
    {
        "sasl.jaas.config",
        "ssl.truststore.location",
        "ssl.truststore.type",
        "ssl.truststore.password",
        "ssl.truststore.certificates",
        "ssl.keystore.type",
        "ssl.keystore.key",
        "ssl.keystore.certificate.chain",
        "ssl.enabled.protocols",
        "ssl.protocol",
    }
)


def librdkafka_config(configs: Mapping[str, str], prefix: str = "") -> dict[str, str]:
    """``configs`` for confluent-kafka (librdkafka): a Java client's security keys (as Spark's
    Kafka sink and Kafka's tools take them: ``sasl.jaas.config``, ``ssl.truststore.*``, ...)
    turned into librdkafka's (``sasl.username``/``sasl.password``, ``ssl.ca.location`` or
    ``ssl.ca.pem``, ``ssl.keystore.*`` or ``ssl.certificate.location``/``ssl.key.location``,
    ``ssl.endpoint.identification.algorithm`` https/none); every other key as given. Configs
    without a Java-only key are librdkafka's already and pass unchanged.

    Raises:
        ConfigError: as :func:`client_security` (the keys named with ``prefix``).
    """
    if not _JAVA_ONLY & set(configs):
        return dict(configs)
    java = {k: v for k, v in configs.items() if k in CLIENT_SECURITY_KEYS}
    out = {k: v for k, v in configs.items() if k not in CLIENT_SECURITY_KEYS}
    sec = client_security(java, prefix)  # every check, with the Java key names
    out["security.protocol"] = sec.security_protocol
    if sec.uses_sasl:
        assert sec.sasl_mechanism is not None
        out["sasl.mechanism"] = sec.sasl_mechanism
        out["sasl.username"] = sec.username or ""
        out["sasl.password"] = sec.password or ""
    if not sec.uses_ssl:
        return out
    values = {k: parse_security_value(k, str(v)) for k, v in java.items() if k in _CLIENT_SSL_KEYS}

    def get(key: str) -> Any:
        return values.get(key, security_default(key))

    algorithm = str(get("ssl.endpoint.identification.algorithm") or "").strip().lower()
    out["ssl.endpoint.identification.algorithm"] = "https" if algorithm == "https" else "none"
    factory = SslFactory(_CLIENT, _ClientConfigs(values, prefix))
    if get("ssl.truststore.certificates") is not None:
        out["ssl.ca.pem"] = factory.truststore_pem()
    elif get("ssl.truststore.location") is not None:
        if str(get("ssl.truststore.type")).upper() == "PEM":
            out["ssl.ca.location"] = str(get("ssl.truststore.location"))
        else:
            out["ssl.ca.pem"] = factory.truststore_pem()
    location = get("ssl.keystore.location")
    if location is not None:
        if str(get("ssl.keystore.type")).upper() == "PEM":
            out["ssl.certificate.location"] = out["ssl.key.location"] = str(location)
            if get("ssl.key.password") is not None:
                out["ssl.key.password"] = str(get("ssl.key.password"))
        else:
            out["ssl.keystore.location"] = str(location)
            if get("ssl.keystore.password") is not None:
                out["ssl.keystore.password"] = str(get("ssl.keystore.password"))
    elif get("ssl.keystore.key") is not None:
        out["ssl.key.pem"] = str(get("ssl.keystore.key"))
        out["ssl.certificate.pem"] = str(get("ssl.keystore.certificate.chain"))
        if get("ssl.key.password") is not None:
            out["ssl.key.password"] = str(get("ssl.key.password"))
    return out
