"""What each listener does to a new connection before requests flow (Kafka's
``ChannelBuilders``): TLS or not, SASL or not, and how the principal is found.

=================  ==========  ======  =========================================
protocol           TLS         SASL    principal
=================  ==========  ======  =========================================
PLAINTEXT          no          no      ``User:ANONYMOUS``
SSL                yes         no      client certificate subject, mapped by
                                       ``ssl.principal.mapping.rules``, else
                                       ``User:ANONYMOUS``
SASL_PLAINTEXT     no          yes     ``User:<authenticated user>``
SASL_SSL           yes         yes     ``User:<authenticated user>``
=================  ==========  ======  =========================================

:func:`build_channel_builders` runs once at startup and does every check that can fail (key
stores, passwords, JAAS), so a bad setting stops the broker with one line naming the key.

Immutable after construction; :meth:`ChannelBuilder.new_authenticator` is called on the event
loop for each connection.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tierlog.errors import ConfigError
from tierlog.security.credential_store import ScramCredentialStore
from tierlog.security.jaas_config import JaasConfigError
from tierlog.security.plain import PlainSaslServer, plain_users
from tierlog.security.principal import (
    ANONYMOUS,
    KafkaPrincipal,
    SslPrincipalMapper,
    distinguished_name,
)
from tierlog.security.sasl_server import SaslServer, SaslServerAuthenticator
from tierlog.security.scram import ScramMechanism, ScramSaslServer
from tierlog.security.ssl_factory import SslFactory

if TYPE_CHECKING:
    from tierlog.server.kafka_config import KafkaConfig

__all__ = ["ChannelBuilder", "build_channel_builders"]


@dataclass(frozen=True, slots=True)
class ChannelBuilder:
    """One listener's connection setup."""

    listener: str
    security_protocol: str
    ssl_context: ssl.SSLContext | None = None
    principal_mapper: SslPrincipalMapper | None = None
    sasl_mechanisms: tuple[str, ...] = ()
    plain_users: Mapping[str, str] | None = None
    credentials: ScramCredentialStore | None = None
    reauth_ms: int = 0
    failed_delay_ms: int = 100
    #: Largest frame before authentication (``sasl.server.max.receive.size``); None: no bound
    #: beyond ``socket.request.max.bytes``.
    max_receive_size_before_auth: int | None = None

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    def new_authenticator(self) -> SaslServerAuthenticator | None:
        """The SASL state of a new connection (None on PLAINTEXT and SSL listeners)."""
        if not self.uses_sasl:
            return None
        return SaslServerAuthenticator(
            self.sasl_mechanisms,
            self._new_server,
            reauth_ms=self.reauth_ms,
            failed_delay_ms=self.failed_delay_ms,
        )

    def _new_server(self, mechanism: str) -> SaslServer:
        if mechanism == "PLAIN":
            return PlainSaslServer(self.plain_users or {})
        scram = ScramMechanism.for_name(mechanism)
        if scram is None or self.credentials is None:  # handshake checked the name
            raise RuntimeError(f"no SASL server for {mechanism}")
        return ScramSaslServer(scram, self.credentials.get)

    def ssl_principal(self, peer_certificate: bytes | None) -> KafkaPrincipal:
        """The principal of a TLS connection (non-SASL): the mapped certificate subject, or
        ANONYMOUS without a certificate.

        Raises:
            NoMatchingRule: no mapping rule applies (the connection must be refused).
            ValueError: the certificate does not parse.
        """
        if peer_certificate is None or self.principal_mapper is None:
            return ANONYMOUS
        dn = distinguished_name(peer_certificate)
        return KafkaPrincipal("User", self.principal_mapper.get_name(dn))


def build_channel_builders(
    config: KafkaConfig, credentials: ScramCredentialStore
) -> dict[str, ChannelBuilder]:
    """A :class:`ChannelBuilder` per listener of ``config``.

    Raises:
        ConfigError: a key store, trust store, password or JAAS config that cannot be used.
    """
    sec = config.listener_security
    out: dict[str, ChannelBuilder] = {}
    for e in config.listeners:
        name, protocol = e.listener_name, e.security_protocol
        ctx = None
        mapper = None
        if protocol in ("SSL", "SASL_SSL"):
            ctx = SslFactory(name, sec).create_server_context()
            if protocol == "SSL":
                mapper = SslPrincipalMapper(str(sec.get(name, "ssl.principal.mapping.rules")))
        users: Mapping[str, str] | None = None
        mechanisms: tuple[str, ...] = ()
        if protocol.startswith("SASL_"):
            mechanisms = tuple(sec.get(name, "sasl.enabled.mechanisms"))
            if "PLAIN" in mechanisms:
                jaas = sec.jaas_config(name, "PLAIN")
                key = sec.jaas_source(name, "PLAIN")
                if jaas is None:
                    raise ConfigError(
                        key,
                        f"listener {name} enables PLAIN: its users come from {key} "
                        '(PlainLoginModule required user_<name>="<password>";)',
                    )
                try:
                    users = plain_users(jaas)
                except JaasConfigError as err:
                    raise ConfigError(key, f"invalid JAAS configuration: {err}") from None
        out[name] = ChannelBuilder(
            listener=name,
            security_protocol=protocol,
            ssl_context=ctx,
            principal_mapper=mapper,
            sasl_mechanisms=mechanisms,
            plain_users=users,
            credentials=credentials,
            reauth_ms=int(sec.get(name, "connections.max.reauth.ms")),
            failed_delay_ms=int(sec.get(name, "connection.failed.authentication.delay.ms")),
            max_receive_size_before_auth=int(sec.get(name, "sasl.server.max.receive.size"))
            if protocol.startswith("SASL_")
            else None,
        )
    return out
