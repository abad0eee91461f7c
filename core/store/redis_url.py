"""A Redis store URL's own options (`?namespace=`, `lock_ttl=`, `lock_wait=`, `cluster=`),
read apart from the ones redis-py knows, each checked with a clear error."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

_OWN_QUERY = ("namespace", "lock_ttl", "lock_wait", "cluster")  # ours; redis-py knows the others


def split_own(url: str) -> tuple[str, dict[str, str]]:
    """`url` without the query parameters that are ours (redis-py does not know them), and them."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    own = {k: v for k, v in query if k in _OWN_QUERY}
    rest = urlencode([(k, v) for k, v in query if k not in _OWN_QUERY])
    return urlunsplit(parts._replace(query=rest)), own


def flag(own: dict[str, str], name: str) -> bool:
    """A yes/no option from the URL (`?cluster=1`); `ValueError` for anything else."""
    raw = own.get(name, "0").strip().lower()
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"{name} must be 1 or 0")


def seconds(own: dict[str, str], name: str, default: float, *, positive: bool) -> float:
    """A time from the URL (`?lock_ttl=5`), else `default`; `ValueError` when out of range."""
    raw = own.get(name)
    value = default if raw is None else float(raw)
    if not (value > 0 if positive else value >= 0) or value != value or value == float("inf"):
        raise ValueError(f"{name} must be a {'positive' if positive else 'non-negative'} number of seconds")
    return value
