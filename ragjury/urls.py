"""URLs as ragjury may show or store them: never with a password in them."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

_QUERY_SECRET = re.compile(r"(?i)\b(password|passwd|pwd|api[_-]?key|token|secret)=[^&#]*")


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
