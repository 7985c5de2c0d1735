"""URLs as ragjury may show or store them: never with a password in them."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

_QUERY_SECRET = re.compile(r"(?i)\b(password|passwd|pwd|api[_-]?key|token|secret)=[^&#]*")
_QUERY_SECRET_IN_TEXT = re.compile(
    r"(?i)\b(password|passwd|pwd|api[_-]?key|access_token|token|secret)=[^&#\s'\"]*"
)
_URL_PASSWORD_IN_TEXT = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s/:@'\"]*):[^\s@/'\"]*@")


def redact_text(text: str) -> str:
    """``text`` (an error message, a log line) with the password of every URL in it and any
    secret query parameter replaced by ``***``."""
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
