"""``java.util.Properties`` text, the syntax of ``server.properties`` and of every
``--config`` / ``*.properties`` file tierlog reads (Kafka's ``Utils.loadProps``).
"""

from __future__ import annotations

from tierlog.errors import ConfigError

__all__ = ["parse_properties"]


def parse_properties(text: str, *, source: str = "<properties>") -> dict[str, str]:
    """Parse ``java.util.Properties`` text into a dict; a later duplicate key wins.

    The rules of ``Properties.load``: a logical line is continued by an odd number of
    trailing backslashes (leading whitespace of the continuation is dropped); lines whose
    first non-blank character is ``#`` or ``!`` are comments; the key ends at the first
    unescaped ``=``, ``:`` or whitespace, then blanks and at most one ``=``/``:`` are skipped;
    escapes ``\\t \\n \\r \\f \\uXXXX`` are decoded and a backslash before any other character
    stands for that character (``\\=``, ``\\:``, ``\\ ``, ``\\\\``).

    Raises:
        ConfigError: a malformed ``\\uXXXX`` escape (keyed by ``source:line``).
    """
    props: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        lineno = i + 1
        line = lines[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line) and i < len(lines):
            line = line[:-1] + lines[i].lstrip(" \t\f")
            i += 1
        if _continues(line):  # continuation at end of input
            line = line[:-1]
        key, value = _split_key_value(line)
        where = f"{source}:{lineno}"
        props[_unescape(key, where)] = _unescape(value, where)
    return props


def _continues(line: str) -> bool:
    n = len(line) - len(line.rstrip("\\"))
    return n % 2 == 1


def _split_key_value(line: str) -> tuple[str, str]:
    pos = 0
    n = len(line)
    while pos < n:
        c = line[pos]
        if c == "\\":
            pos += 2
            continue
        if c in "=: \t\f":
            break
        pos += 1
    key = line[: min(pos, n)]
    pos = min(pos, n)
    while pos < n and line[pos] in " \t\f":
        pos += 1
    if pos < n and line[pos] in "=:":
        pos += 1
        while pos < n and line[pos] in " \t\f":
            pos += 1
    return key, line[pos:]


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(s: str, where: str) -> str:
    if "\\" not in s:
        return s
    out: list[str] = []
    i = 0
    while i < len(s):
        c = s[i]
        if c != "\\" or i + 1 >= len(s):
            out.append(c)
            i += 1
            continue
        nxt = s[i + 1]
        if nxt == "u":
            digits = s[i + 2 : i + 6]
            if len(digits) != 4 or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise ConfigError(where, f"malformed \\uxxxx encoding in {s!r}")
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
    return "".join(out)
