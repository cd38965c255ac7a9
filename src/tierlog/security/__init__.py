"""Listener security: TLS (:mod:`.ssl_factory`), SASL (:mod:`.sasl_server`, :mod:`.plain`,
:mod:`.scram`, :mod:`.credential_store`), principals (:mod:`.principal`) and the config keys
(:mod:`.security_config`).

Sans-IO where bytes are parsed: the SASL state machine and the mechanisms take tokens and
return tokens; :mod:`tierlog.server.network` carries them.
"""
