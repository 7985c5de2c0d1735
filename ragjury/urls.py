"""URLs as ragjury may show or store them: never with a password in them.

One rule, applied where URLs enter and where text leaves. Every URL a run takes (``--db``,
``--base-url``, ``--target``, judge endpoints, the OTLP endpoint and headers) passes
:func:`remember_secrets` where it enters: its password and its secret query values become
known to this process. :func:`redact_text`, which every way out calls (the log processors,
stdlib log records, the command line's error line, a stored failure), hides those known
secrets wherever they appear, even cut out of their URL (a driver's error that quotes only
the password, an exporter that moves the query string), and the password and secret query
values of any URL it finds besides."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit, urlunsplit

_QUERY_SECRET = re.compile(r"(?i)\b(password|passwd|pwd|api[_-]?key|token|secret)=[^&#]*")
_QUERY_SECRET_IN_TEXT = re.compile(
    r"(?i)\b(password|passwd|pwd|api[_-]?key|access_token|token|secret)=[^&#\s'\"]*"
)
_URL_PASSWORD_IN_TEXT = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s/:@'\"]*):[^\s@/'\"]*@")
_SECRET_NAME = re.compile(r"(?i)^(password|passwd|pwd|api[_-]?key|access_token|token|secret)$")
_SECRET_HEADER = re.compile(r"(?i)(authorization|api[_-]?key|token|secret|password|cookie)")
_SHORTEST_SECRET = 4
"""A shorter secret is not hidden where it stands alone (it would blot out ordinary words);
its URL's pattern still hides it inside the URL."""

_known: set[str] = set()


def remember_secrets(url: str | None) -> str | None:
    """Note the password and secret query values of ``url`` (where a URL enters ragjury), so
    :func:`redact_text` hides them in any text from now on; ``url`` is returned unchanged."""
    if not url:
        return url
    try:
        parts = urlsplit(url)
        found = [parts.password or ""]
    except ValueError:  # not a URL we can take apart: what follows the scheme may be secret
        return url
    found += [value for name, value in parse_qsl(parts.query) if _SECRET_NAME.match(name)]
    _known.update(secret for secret in found if len(secret) >= _SHORTEST_SECRET)
    return url


def remember_secret(value: str) -> None:
    """Note a secret that is not a URL (a header's value, an API key)."""
    if len(value) >= _SHORTEST_SECRET:
        _known.add(value)


def secret_header(name: str) -> bool:
    """Whether an HTTP header of this name carries a credential (its value is remembered)."""
    return _SECRET_HEADER.search(name) is not None


def redact_text(text: str) -> str:
    """``text`` (an error message, a log line) with every secret noted by
    :func:`remember_secrets`, the password of every URL in it and any secret query parameter
    replaced by ``***``."""
    for secret in _known:
        if secret in text:
            text = text.replace(secret, "***")
    if "://" not in text and "=" not in text:
        return text
    text = _URL_PASSWORD_IN_TEXT.sub(r"\1:***@", text)
    return _QUERY_SECRET_IN_TEXT.sub(r"\1=***", text)


def redacted(url: str) -> str:
    """``url`` with any password replaced by ``***`` (``http://user:***@host/v1``)."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # not a URL we can take apart: show nothing of what follows a '@'
        return url.rsplit("@", 1)[-1] if "@" in url else url
    if parts.query:
        parts = parts._replace(query=_QUERY_SECRET.sub(r"\1=***", parts.query))
    if password is None:
        return urlunsplit(parts)
    host = parts.hostname or ""
    if parts.port is not None:
        host += f":{parts.port}"
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def endpoint_shown(url: str) -> str:
    """An endpoint as a report's header shows it: scheme, host and path, no user, password
    or query string."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))
