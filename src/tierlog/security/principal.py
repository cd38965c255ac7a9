"""Who a connection is: :class:`KafkaPrincipal` (``User:alice``) and how TLS client
certificates become one (Kafka's ``DefaultKafkaPrincipalBuilder`` and ``SslPrincipalMapper``).

* PLAINTEXT, and SSL without a client certificate: ``User:ANONYMOUS``.
* SSL with a client certificate: the certificate's subject as Kafka prints it (Java's
  ``X500Principal.getName()``, RFC 2253: most specific first, ``CN=alice,OU=eng,O=acme``),
  mapped by ``ssl.principal.mapping.rules``.
* SASL: ``User:<the authenticated user name>``.

``ssl.principal.mapping.rules`` is a comma-separated list tried in order; the first rule that
applies gives the name:

* ``DEFAULT``: the distinguished name unchanged;
* ``RULE:pattern/replacement/`` with an optional ``L`` or ``U`` after the last slash: when
  ``pattern`` (a regular expression) matches the *whole* name, the name with every match of
  the pattern replaced by ``replacement`` (``$1`` refers to a group), then lowercased or
  uppercased. A ``/`` or ``\\`` inside a pattern or replacement is escaped with ``\\``.

No rule applies: the connection is refused (Kafka's ``NoMatchingRule``).

Java and Python regular expressions agree on what such rules use (groups, classes, lazy
quantifiers, anchors); Java-only constructs (possessive quantifiers, ``\\p{javaLowerCase}``)
are refused when the rules are parsed.

Pure values; thread-safe.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "ANONYMOUS",
    "KafkaPrincipal",
    "NoMatchingRule",
    "SslPrincipalMapper",
    "distinguished_name",
]


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """A principal as ACLs name it: ``User:alice``."""

    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"


#: The principal of an unauthenticated connection (PLAINTEXT, SSL without a certificate).
ANONYMOUS = KafkaPrincipal("User", "ANONYMOUS")


class NoMatchingRule(Exception):
    """No ``ssl.principal.mapping.rules`` rule applies to a certificate's name."""


# Kafka's grammar, verbatim: a rule is DEFAULT, RULE:pattern/replacement/[LU] or anything else
# (refused unless empty); rules are split on commas outside a rule's slashes.
_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_RULE_PARSER = re.compile(_RULE)
_BACK_REFERENCE = re.compile(r"\$(\d+)")


@dataclass(frozen=True, slots=True)
class _Rule:
    is_default: bool
    pattern: re.Pattern[str] | None = None
    replacement: str = ""
    lower: bool = False
    upper: bool = False
    shown: str = ""  # the replacement as written (Java syntax)

    def apply(self, dn: str) -> str | None:
        if self.is_default:
            return dn
        assert self.pattern is not None
        if self.pattern.fullmatch(dn) is None:
            return None
        result = self.pattern.sub(self.replacement, dn)
        if self.lower:
            return result.lower()
        if self.upper:
            return result.upper()
        return result

    def __str__(self) -> str:
        if self.is_default:
            return "DEFAULT"
        assert self.pattern is not None
        case = "/L" if self.lower else "/U" if self.upper else ""
        return f"RULE:{self.pattern.pattern}/{self.shown}{case}"


def _python_replacement(java: str, groups: int) -> str:
    """A Java ``replaceAll`` replacement as a Python ``re.sub`` template.

    ``$n`` is group n; like Kafka (after Apache NiFi) a reference past the last group loses
    trailing digits until it names a group (``$12`` with 3 groups is ``$1`` then ``2``), and
    one that still names none is the literal text. ``\\x`` is the literal ``x``.
    """
    out: list[str] = []
    i = 0
    while i < len(java):
        c = java[i]
        if c == "\\" and i + 1 < len(java):
            out.append(java[i + 1].replace("\\", "\\\\"))
            i += 2
            continue
        m = _BACK_REFERENCE.match(java, i) if c == "$" else None
        if m is not None:
            digits = m.group(1)
            n = int(digits)
            while n > groups and n >= 10:
                n //= 10
            if n > groups or (digits.startswith("0") and groups == 0):
                out.append("$" + digits)  # a literal, as Kafka escapes it
            else:
                out.append(f"\\g<{n}>" + digits[len(str(n)) :])
            i = m.end()
            continue
        out.append("\\\\" if c == "\\" else c)
        i += 1
    return "".join(out)


class SslPrincipalMapper:
    """``ssl.principal.mapping.rules``, parsed once.

    Raises:
        ValueError: (from the constructor) a rule that does not parse, or whose pattern is not
            a valid regular expression.
    """

    def __init__(self, rules: str | None = "DEFAULT") -> None:
        text = (rules if rules is not None else "DEFAULT").strip()
        parsed: list[_Rule] = []
        for m in _RULE_SPLITTER.finditer(text):
            rule = m.group(1)
            p = _RULE_PARSER.match(rule)
            if p is None:
                raise ValueError(f"Invalid rule: {rule}")
            if p.end() != len(rule):
                raise ValueError(
                    f"Invalid rule: `{rule}`, unmatched substring: `{rule[p.end() :]}`"
                )
            if p.group(1) is not None:
                parsed.append(_Rule(True))
            elif p.group(2) is not None:
                try:
                    pattern = re.compile(p.group(2))
                except re.error as e:
                    raise ValueError(f"Invalid rule: {rule}: {e}") from None
                replacement = _python_replacement(p.group(4), pattern.groups)
                parsed.append(
                    _Rule(
                        False,
                        pattern,
                        replacement,
                        lower=p.group(6) == "L",
                        upper=p.group(6) == "U",
                        shown=p.group(4),
                    )
                )
            elif rule.strip():
                raise ValueError(f"Invalid rule: {rule}")
        self.rules: tuple[_Rule, ...] = tuple(parsed)

    def get_name(self, distinguished_name: str) -> str:
        """The principal name of a certificate subject.

        Raises:
            NoMatchingRule: no rule applies.
        """
        for r in self.rules:
            name = r.apply(distinguished_name)
            if name is not None:
                return name
        raise NoMatchingRule(
            f"No rules apply to {distinguished_name}, rules [{', '.join(map(str, self.rules))}]"
        )

    def __repr__(self) -> str:
        return f"SslPrincipalMapper(rules = [{', '.join(map(str, self.rules))}])"


def distinguished_name(der_certificate: bytes) -> str:
    """The subject of a DER certificate as Java's ``X500Principal.getName()`` prints it
    (RFC 2253: the last RDN first, ``CN=alice,OU=eng,O=acme,C=US``).

    Attribute types Java has no keyword for are printed with their dotted OID, as Java does;
    their values as strings (Java prints them as ``#`` and the hex of the DER value).

    Raises:
        ValueError: the bytes are not a certificate.
    """
    from cryptography import x509

    cert = x509.load_der_x509_certificate(der_certificate)
    return cert.subject.rfc4514_string()
