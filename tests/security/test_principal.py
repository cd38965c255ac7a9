"""ssl.principal.mapping.rules (Kafka's SslPrincipalMapperTest cases) and certificate names."""

from __future__ import annotations

import pytest

from tierlog.security.principal import (
    ANONYMOUS,
    KafkaPrincipal,
    NoMatchingRule,
    SslPrincipalMapper,
)


def test_principal_prints_as_kafka():
    assert str(KafkaPrincipal("User", "alice")) == "User:alice"
    assert str(ANONYMOUS) == "User:ANONYMOUS"


@pytest.mark.parametrize(
    "rules",
    [
        "DEFAULT",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/,DEFAULT",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
        "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/,DEFAULT",
        "RULE:^CN=(.*?)/\\/$1/",  # an escaped slash in the replacement
    ],
)
def test_valid_rules(rules):
    SslPrincipalMapper(rules)


@pytest.mark.parametrize(
    "rules",
    ["default", "DEFAUL", "DEFAULT/L", "RULE:", "RULE:1", "RULE:1/1/L/x", "RULE:^CN=(/x/"],
)
def test_invalid_rules(rules):
    with pytest.raises(ValueError):
        SslPrincipalMapper(rules)


def test_rules_apply_in_order():
    m = SslPrincipalMapper(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,"
        "DEFAULT"
    )
    assert m.get_name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "Duke"
    assert m.get_name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert m.get_name("CN=Duke,OU=JavaSoft,O=Sun Microsystems") == "duke"
    assert (
        m.get_name("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"
    )


def test_upper_case_and_references_past_the_last_group():
    assert SslPrincipalMapper("RULE:^CN=(.*)$/$1/U").get_name("CN=alice") == "ALICE"
    # $12 with one group is $1 then "2" (Kafka's escapeLiteralBackReferences)
    assert SslPrincipalMapper("RULE:^CN=(.*)$/$12/").get_name("CN=bob") == "bob2"


def test_no_matching_rule():
    m = SslPrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/")
    with pytest.raises(NoMatchingRule, match="No rules apply to CN=x,OU=Other"):
        m.get_name("CN=x,OU=Other")
