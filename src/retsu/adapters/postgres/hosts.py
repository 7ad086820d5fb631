"""Opening a connection from a Retsu database URL, which may name several hosts.

``database.url`` and ``database.session_url`` are libpq URLs (SPEC §10), and like libpq's
they may list hosts to try in turn, usually with ``target_session_attrs=read-write`` so
that only the primary is taken::

    postgresql://retsu@db1:5432,db2:5432/retsu?target_session_attrs=read-write
    postgresql://retsu@/retsu?host=db1,db2&port=5432,5433&target_session_attrs=read-write

Every connection Retsu opens goes through ``PostgresHosts.connect``: the engine's pool
(``engine.py``: API, workers, migrations, health checks) and the LISTEN connection
(``notifications.py``). asyncpg reads libpq's syntax, ``sslmode``, passwords and
``target_session_attrs`` itself, and is handed one host at a time, because of two things
it does differently from libpq, both of which cost a failover its 5 seconds:

* **A timeout per host.** asyncpg's ``timeout`` covers the whole list, so a first host
  that does not answer at all (a machine gone, its packets dropped rather than refused)
  uses it up and the next host is never tried. Here each host gets libpq's
  ``connect_timeout`` when the URL sets one, else an equal share of the connect timeout.
* **The host that answered last is tried first.** Tried in listed order every time,
  each new connection after a failover would first wait out the dead host's timeout.

A host that is not what ``target_session_attrs`` asks for (a standby, a demoted old
primary) is passed over like an unreachable one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import SplitResult, parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg

SCHEMES: Final = ("postgresql", "postgres", "postgresql+asyncpg")
# Retsu writes on every connection, so a session it may be given must accept writes:
# standby, read-only and prefer-standby would hand it a server that refuses them.
WRITABLE_SESSION_ATTRS: Final = ("any", "read-write", "primary")


class NoUsableHost(ConnectionError):
    """No host of the URL gave a usable session. The message says why for each host
    (never with a password); an OSError, like a refused connection."""


@dataclass(frozen=True)
class Host:
    url: str  # a libpq URL naming this one host
    label: str  # host:port (or the socket directory), for messages


def libpq_url(url: str) -> str:
    """The URL as asyncpg (and libpq) read it: ``postgresql://`` whatever Retsu accepted."""
    scheme, separator, rest = url.partition("://")
    if not separator or scheme.lower() not in SCHEMES:
        raise ValueError(f"not a PostgreSQL URL (scheme {scheme!r})")
    return f"postgresql://{rest}"


def split_hosts(url: str) -> list[Host]:
    """One URL per host of ``url``, in its order; ``connect_timeout`` taken out (it is
    applied per host by ``PostgresHosts``, and asyncpg would send it to the server as a
    setting) and ``ssl`` spelt ``sslmode``. ValueError, never echoing the URL, when the
    hosts or ports do not add up."""
    plain = libpq_url(url)
    try:
        parts = urlsplit(plain)
    except ValueError:  # e.g. an unclosed IPv6 bracket (its message would quote the URL)
        raise ValueError("is not a valid URL") from None
    query = parse_qsl(parts.query, keep_blank_values=True)
    # SQLAlchemy's asyncpg URLs (postgresql+asyncpg://, accepted too) spell sslmode "ssl";
    # asyncpg would send an unknown parameter to the server as a setting.
    kept = [
        ("sslmode" if key == "ssl" else key, value)
        for key, value in query
        if key != "connect_timeout"
    ]
    userinfo, at, hostlist = parts.netloc.rpartition("@")
    query_hosts = [value for key, value in kept if key == "host"]
    if "," in hostlist:
        if query_hosts:
            raise ValueError("names hosts both before the path and in host=")
        return [
            Host(_with(parts, f"{userinfo}{at}{host}", kept), host)
            for host in _items(hostlist, "host")
        ]
    if len(query_hosts) == 1 and "," in query_hosts[0]:
        hosts = _items(query_hosts[0], "host")
        ports_given = [value for key, value in kept if key == "port"]
        ports = _items(ports_given[0], "port") if len(ports_given) == 1 else []
        if len(ports) > 1 and len(ports) != len(hosts):
            raise ValueError(f"names {len(hosts)} hosts but {len(ports)} ports")
        others = [(key, value) for key, value in kept if key not in ("host", "port")]
        split = []
        for index, host in enumerate(hosts):
            port = [("port", ports[index if len(ports) > 1 else 0])] if ports else []
            label = f"{host}:{port[0][1]}" if port else host
            split.append(Host(_with(parts, parts.netloc, [("host", host), *port, *others]), label))
        return split
    label = hostlist or ",".join(query_hosts) or "localhost"
    if kept == query:
        return [Host(plain, label)]  # nothing to change: the URL exactly as written
    return [Host(_with(parts, parts.netloc, kept), label)]


def _items(listed: str, what: str) -> list[str]:
    items = listed.split(",")
    if any(not item for item in items):
        raise ValueError(f"has an empty {what} in its list")
    return items


def _with(parts: SplitResult, netloc: str, query: Sequence[tuple[str, str]]) -> str:
    return urlunsplit((parts.scheme, netloc, parts.path, urlencode(query), parts.fragment))


def connect_timeout(url: str) -> float | None:
    """libpq's ``connect_timeout`` (seconds, per host) when the URL sets one."""
    values = [v for k, v in parse_qsl(urlsplit(libpq_url(url)).query) if k == "connect_timeout"]
    if not values:
        return None
    try:
        seconds = float(values[-1])
    except ValueError:
        raise ValueError("has a connect_timeout that is not a number of seconds") from None
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError("has a connect_timeout that is not a positive number of seconds")
    return seconds


def check_url(url: str) -> None:
    """What settings validation asks of a database URL beyond its scheme: hosts and
    ports that add up, valid ports, a connect_timeout in seconds, and a
    target_session_attrs that yields writable sessions. ValueError, never echoing it."""
    hosts = split_hosts(url)
    for host in hosts:
        try:
            urlsplit(host.url).port  # noqa: B018 -- property access validates the port
        except ValueError:
            raise ValueError("has an invalid port") from None
    connect_timeout(url)
    query = parse_qsl(urlsplit(libpq_url(url)).query)
    for key, value in query:
        if key == "target_session_attrs" and value not in WRITABLE_SESSION_ATTRS:
            raise ValueError(
                f"target_session_attrs must be one of {', '.join(WRITABLE_SESSION_ATTRS)} "
                f"(Retsu writes on every connection), got {value!r}"
            )


class PostgresHosts:
    """The hosts of one database URL, and which of them answered last."""

    def __init__(self, url: str) -> None:
        self.hosts = split_hosts(url)
        self._connect_timeout = connect_timeout(url)
        self._preferred = 0

    @property
    def first_url(self) -> str:
        return self.hosts[0].url

    def _order(self) -> list[int]:
        preferred = self._preferred
        return [preferred, *(i for i in range(len(self.hosts)) if i != preferred)]

    async def connect(self, *, timeout: float, **arguments: Any) -> Any:  # noqa: ASYNC109
        """A new asyncpg connection to the first host that gives a usable session.

        ``timeout`` bounds the attempt on all hosts together (each gets an equal share)
        unless the URL sets ``connect_timeout``, which applies to each host. The other
        ``arguments`` go to ``asyncpg.connect``."""
        per_host = self._connect_timeout or timeout / len(self.hosts)
        failures: list[tuple[Host, BaseException]] = []
        for index in self._order():
            host = self.hosts[index]
            try:
                connection = await asyncpg.connect(host.url, timeout=per_host, **arguments)
            except BaseException as error:
                # Passed over (or cancelled while trying it): the next attempt starts with
                # the host after it, not with one that may never answer.
                if self._preferred == index:
                    self._preferred = (index + 1) % len(self.hosts)
                if not isinstance(error, Exception):
                    raise
                failures.append((host, error))
                continue
            self._preferred = index
            return connection
        raise _no_usable_host(failures)


def _no_usable_host(failures: list[tuple[Host, BaseException]]) -> BaseException:
    last = failures[-1][1]
    if len(failures) == 1 and not isinstance(last, asyncpg.TargetServerAttributeNotMatched):
        return last  # one host: its own error, as asyncpg raised it
    reasons = "; ".join(f"{host.label}: {_reason(error)}" for host, error in failures)
    error = NoUsableHost(f"no host gave a usable session ({reasons})")
    error.__cause__ = last
    return error


def _reason(error: BaseException) -> str:
    if isinstance(error, asyncpg.TargetServerAttributeNotMatched):
        return "not a read-write server (a standby, or read-only)"
    if isinstance(error, TimeoutError):
        return "no answer within the connect timeout"
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
