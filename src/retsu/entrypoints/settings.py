"""Configuration loader (SPEC §2): built-in defaults, then YAML, then ``RETSU_*`` variables.

The result is an immutable, typed tree whose attribute paths mirror the YAML keys exactly:
``settings.cache.distributed.url`` is ``cache: {distributed: {url: …}}`` in YAML and
``RETSU_CACHE__DISTRIBUTED__URL`` in the environment. Every leaf carries its own checker in
the dataclass field metadata, so the table in SPEC §2 lives in exactly one place.

Errors are one line, name the setting and where the value came from, and never echo a
secret (URLs, token secrets): those values are described, not quoted.
"""

from __future__ import annotations

import dataclasses
import difflib
import ipaddress
import json
import os
import re
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar
from urllib.parse import urlsplit

import yaml

from retsu.adapters.telemetry.logging import FORMATS, LogFilterError, parse_log_filter

__all__ = [
    "DEFAULT_CONFIG_FILE",
    "ENV_PREFIX",
    "SCOPES",
    "AuthSettings",
    "CacheSettings",
    "ConfigError",
    "DatabaseSettings",
    "DeadLetterMessageCleanerSettings",
    "DistributedCacheSettings",
    "ExpiredMessageCleanerSettings",
    "HttpSettings",
    "InMemoryCacheSettings",
    "LoadedSettings",
    "LoggingSettings",
    "ManagementSettings",
    "MetricsSettings",
    "QueueNamesRegionSettings",
    "QueueWorkerSettings",
    "RegionsSettings",
    "Settings",
    "StateMetricsCollectorSettings",
    "TelemetrySettings",
    "Token",
    "TracesSettings",
    "WorkerSettings",
    "build_settings",
    "env_var_name",
    "load_settings",
    "redacted_url",
    "setting_paths",
]

DEFAULT_CONFIG_FILE: Final = Path("config") / "retsu.yaml"
ENV_PREFIX: Final = "RETSU_"
SCOPES: Final = frozenset({"messages", "admin"})
ENVIRONMENTS: Final = ("local", "test", "staging", "production")
# SPEC says only "≥ 1": any positive 32-bit count is accepted (PostgreSQL's own
# max_connections, 100 by default, is the real limit; see docs/operations.md).
MAX_DATABASE_CONNECTIONS: Final = 2_147_483_647


class ConfigError(Exception):
    """Bad configuration. ``str(error)`` is one human-readable line that names the setting
    (``http.port: must be between 1 and 65535, got 0 (from RETSU_HTTP__PORT)``)."""

    def __init__(self, message: str, *, setting: str | None = None, source: str | None = None):
        # One line, whatever the parts contained.
        super().__init__(re.sub(r"\s*[\r\n]+\s*", " ", message))
        self.setting = setting
        self.source = source


# --- leaf checkers ------------------------------------------------------------------------


class _Invalid(Exception):
    """A leaf value is wrong. ``where`` extends the setting path (``[0].scopes``)."""

    def __init__(self, message: str, where: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.where = where


def _describe(value: object) -> str:
    """A short rendering of a (non-secret) value for an error message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return repr(value if len(value) <= 60 else value[:57] + "...")
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


def _kind(value: object) -> str:
    """The type of a value without its content, for settings that may hold secrets."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


class _Leaf(Protocol):
    def from_yaml(self, value: object) -> object: ...
    def from_env(self, text: str) -> object: ...


_ENV_INT: Final = re.compile(r"[+-]?[0-9]{1,30}")


@dataclass(frozen=True, slots=True)
class _Int:
    low: int
    high: int

    def check(self, value: int) -> int:
        if not self.low <= value <= self.high:
            raise _Invalid(f"must be between {self.low} and {self.high}, got {value}")
        return value

    def from_yaml(self, value: object) -> int:
        # bool is an int in Python; `port: true` must not pass as 1.
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Invalid(f"must be an integer, got {_describe(value)}")
        return self.check(value)

    def from_env(self, text: str) -> int:
        if not _ENV_INT.fullmatch(text.strip()):
            raise _Invalid(f"must be an integer, got {_describe(text)}")
        return self.check(int(text.strip()))


_ENV_TRUE: Final = frozenset({"true", "1", "yes", "on"})
_ENV_FALSE: Final = frozenset({"false", "0", "no", "off"})
# The YAML 1.1 words PyYAML would read as booleans. Our loader keeps them as strings (so
# `filter: off` stays "off"), and boolean settings accept them back.
_YAML_TRUE: Final = frozenset({"yes", "on"})
_YAML_FALSE: Final = frozenset({"no", "off"})


@dataclass(frozen=True, slots=True)
class _Bool:
    def from_yaml(self, value: object) -> bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in _YAML_TRUE | _YAML_FALSE:
            return value.lower() in _YAML_TRUE
        raise _Invalid(f"must be a boolean (true or false), got {_describe(value)}")

    def from_env(self, text: str) -> bool:
        word = text.strip().lower()
        if word in _ENV_TRUE:
            return True
        if word in _ENV_FALSE:
            return False
        raise _Invalid(
            f"must be a boolean (true/false, 1/0, yes/no, on/off), got {_describe(text)}"
        )


@dataclass(frozen=True, slots=True)
class _Choice:
    choices: tuple[str, ...]

    def from_yaml(self, value: object) -> str:
        if not isinstance(value, str) or value not in self.choices:
            raise _Invalid(f"must be one of {', '.join(self.choices)}, got {_describe(value)}")
        return value

    def from_env(self, text: str) -> str:
        return self.from_yaml(text.strip())


@dataclass(frozen=True, slots=True)
class _IPAddress:
    def from_yaml(self, value: object) -> str:
        if not isinstance(value, str):
            raise _Invalid(f"must be an IP address, got {_describe(value)}")
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise _Invalid(f"must be an IP address, got {_describe(value)}") from None
        return value

    def from_env(self, text: str) -> str:
        return self.from_yaml(text.strip())


_SCHEME: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*")


@dataclass(frozen=True, slots=True)
class _Url:
    """A URL whose scheme is one of ``schemes``. Values are never echoed: they may hold a
    password."""

    schemes: tuple[str, ...]
    example: str
    host_required: bool = True
    nullable: bool = False

    def check(self, value: str) -> str:
        scheme, sep, _ = value.partition("://")
        if not sep or not _SCHEME.fullmatch(scheme):
            raise _Invalid(f"must be a URL such as {self.example}")
        if scheme.lower() not in self.schemes:
            raise _Invalid(f"scheme must be one of {', '.join(self.schemes)}, got {scheme!r}")
        if any(char.isspace() for char in value):
            raise _Invalid("must not contain whitespace")
        try:
            parts = urlsplit(value)
        except ValueError:  # e.g. an unclosed IPv6 bracket
            raise _Invalid("is not a valid URL") from None
        try:
            parts.port  # noqa: B018 -- property access validates the port
        except ValueError:
            raise _Invalid("has an invalid port") from None
        if scheme.lower() == "unix":
            if not parts.path:
                raise _Invalid("must name a socket path, e.g. unix:///run/redis.sock")
        elif self.host_required and not parts.hostname:
            raise _Invalid(f"must name a host, e.g. {self.example}")
        return value

    def from_yaml(self, value: object) -> str | None:
        if value is None and self.nullable:
            return None
        if not isinstance(value, str):
            raise _Invalid(f"must be a URL string, got {_kind(value)}")
        return self.check(value)

    def from_env(self, text: str) -> str | None:
        # An empty variable unsets an optional URL (handy in compose files).
        if not text.strip() and self.nullable:
            return None
        return self.check(text.strip())


@dataclass(frozen=True, slots=True)
class _LogFilterText:
    def from_yaml(self, value: object) -> str:
        if not isinstance(value, str):
            raise _Invalid(f"must be a string such as 'info,retsu=debug', got {_describe(value)}")
        try:
            parse_log_filter(value)
        except LogFilterError as error:
            context = f" in {_describe(value)}" if value.strip() else ""
            raise _Invalid(f"{error}{context}") from None
        return value.strip()

    def from_env(self, text: str) -> str:
        return self.from_yaml(text)


_TOKEN_KEYS: Final = ("name", "secret", "scopes")


@dataclass(frozen=True, slots=True)
class Token:
    """An API token (SPEC §3.5). ``name`` is the audit actor; ``secret`` never appears in a
    repr, an error or a log line."""

    name: str
    secret: str = field(repr=False)
    scopes: frozenset[str]


def _visible_ascii(text: str) -> bool:
    return all("!" <= char <= "~" for char in text)


@dataclass(frozen=True, slots=True)
class _Tokens:
    def from_yaml(self, value: object) -> tuple[Token, ...]:
        if value is None:
            return ()
        if not isinstance(value, list):
            raise _Invalid(
                f"must be a list of {{name, secret, scopes}} objects, got {_kind(value)}"
            )
        tokens = tuple(self._token(index, item) for index, item in enumerate(value))
        names: dict[str, int] = {}
        secrets: dict[str, int] = {}
        for index, token in enumerate(tokens):
            if token.name in names:
                raise _Invalid(
                    f"duplicates the name of auth.tokens[{names[token.name]}]", f"[{index}].name"
                )
            # Two tokens with one secret would make the audit actor ambiguous.
            if token.secret in secrets:
                raise _Invalid(
                    f"duplicates the secret of auth.tokens[{secrets[token.secret]}]",
                    f"[{index}].secret",
                )
            names[token.name] = index
            secrets[token.secret] = index
        return tokens

    def from_env(self, text: str) -> tuple[Token, ...]:
        if not text.strip():
            return ()
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            # The decoder's message holds a position, never the document.
            raise _Invalid(
                f"must be a JSON list of {{name, secret, scopes}} objects "
                f"({error.msg} at line {error.lineno} column {error.colno})"
            ) from None
        return self.from_yaml(value)

    @staticmethod
    def _token(index: int, item: object) -> Token:
        at = f"[{index}]"
        if not isinstance(item, dict):
            raise _Invalid(f"must be a {{name, secret, scopes}} object, got {_kind(item)}", at)
        for key in item:
            if key not in _TOKEN_KEYS:
                hint = _suggest(str(key), _TOKEN_KEYS)
                raise _Invalid(f"unknown key{hint}", f"{at}.{key}")
        for key in _TOKEN_KEYS:
            if key not in item:
                raise _Invalid("is required", f"{at}.{key}")
        name, secret, scopes = item["name"], item["secret"], item["scopes"]
        if not isinstance(name, str) or not name.strip():
            raise _Invalid(f"must be a non-empty string, got {_describe(name)}", f"{at}.name")
        if len(name) > 128 or not name.isprintable():
            raise _Invalid("must be at most 128 printable characters", f"{at}.name")
        if not isinstance(secret, str) or not secret:
            raise _Invalid(f"must be a non-empty string, got {_kind(secret)}", f"{at}.secret")
        if not _visible_ascii(secret):
            # It travels in an `authorization: Bearer` header; anything else never matches.
            raise _Invalid("must contain only visible ASCII characters", f"{at}.secret")
        if (
            not isinstance(scopes, list)
            or not scopes
            or not all(isinstance(scope, str) for scope in scopes)
        ):
            raise _Invalid(
                f"must be a non-empty list of scopes (admin, messages), got {_kind(scopes)}",
                f"{at}.scopes",
            )
        for scope in scopes:
            if scope not in SCOPES:
                raise _Invalid(
                    f"unknown scope {scope!r} (expected admin or messages)", f"{at}.scopes"
                )
        return Token(name=name, secret=secret, scopes=frozenset(scopes))


# --- the settings tree --------------------------------------------------------------------

_T = TypeVar("_T")
_S = TypeVar("_S")


def _leaf(default: _T, check: _Leaf) -> _T:
    return field(default=default, metadata={"leaf": check})


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpSettings:
    bind_address: str = _leaf("127.0.0.1", _IPAddress())
    port: int = _leaf(2424, _Int(1, 65535))
    workers: int = _leaf(1, _Int(1, 64))


@dataclass(frozen=True, slots=True, kw_only=True)
class LoggingSettings:
    filter: str = _leaf("warn", _LogFilterText())
    format: str = _leaf("pretty", _Choice(FORMATS))


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricsSettings:
    max_queues: int = _leaf(10000, _Int(1, 100000))


@dataclass(frozen=True, slots=True, kw_only=True)
class TracesSettings:
    enabled: bool = _leaf(False, _Bool())
    endpoint: str = _leaf(
        "http://127.0.0.1:4317", _Url(("http", "https"), example="http://127.0.0.1:4317")
    )
    timeout_seconds: int = _leaf(5, _Int(1, 60))


@dataclass(frozen=True, slots=True, kw_only=True)
class TelemetrySettings:
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    traces: TracesSettings = field(default_factory=TracesSettings)


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueNamesRegionSettings:
    max_entries: int = _leaf(10000, _Int(1, 1_000_000))
    max_capacity_bytes: int = _leaf(8_388_608, _Int(1, 4_294_967_295))


@dataclass(frozen=True, slots=True, kw_only=True)
class RegionsSettings:
    queue_names: QueueNamesRegionSettings = field(default_factory=QueueNamesRegionSettings)


@dataclass(frozen=True, slots=True, kw_only=True)
class InMemoryCacheSettings:
    enabled: bool = _leaf(True, _Bool())
    regions: RegionsSettings = field(default_factory=RegionsSettings)


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class DistributedCacheSettings:
    enabled: bool = _leaf(True, _Bool())
    url: str = _leaf(
        "redis://127.0.0.1:6379",
        _Url(("redis", "rediss", "unix"), example="redis://127.0.0.1:6379"),
    )
    connection_timeout_milliseconds: int = _leaf(500, _Int(1, 10000))
    command_timeout_milliseconds: int = _leaf(20, _Int(1, 10000))

    def __repr__(self) -> str:
        return (
            f"DistributedCacheSettings(enabled={self.enabled!r}, url={redacted_url(self.url)!r}, "
            f"connection_timeout_milliseconds={self.connection_timeout_milliseconds!r}, "
            f"command_timeout_milliseconds={self.command_timeout_milliseconds!r})"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheSettings:
    in_memory: InMemoryCacheSettings = field(default_factory=InMemoryCacheSettings)
    distributed: DistributedCacheSettings = field(default_factory=DistributedCacheSettings)


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class DatabaseSettings:
    # None: not configured. Every role but `dev` refuses to start without it (the CLI
    # enforces that, since only it knows the role).
    url: str | None = _leaf(
        None,
        _Url(
            ("postgresql", "postgres", "postgresql+asyncpg"),
            example="postgresql://user:password@127.0.0.1:5432/retsu",
            host_required=False,  # libpq allows a socket: postgresql:///retsu?host=/run/pg
            nullable=True,
        ),
    )
    max_connections: int = _leaf(10, _Int(1, MAX_DATABASE_CONNECTIONS))
    acquire_timeout_seconds: int = _leaf(5, _Int(5, 60))

    def __repr__(self) -> str:
        url = None if self.url is None else redacted_url(self.url)
        return (
            f"DatabaseSettings(url={url!r}, max_connections={self.max_connections!r}, "
            f"acquire_timeout_seconds={self.acquire_timeout_seconds!r})"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ManagementSettings:
    bind_address: str = _leaf("127.0.0.1", _IPAddress())
    port: int = _leaf(24247, _Int(1, 65535))


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetterMessageCleanerSettings:
    retention_seconds: int = _leaf(1_209_600, _Int(3600, 31_536_000))
    processing_interval_seconds: int = _leaf(60, _Int(5, 3600))
    batch_size: int = _leaf(500, _Int(1, 10000))
    saturated_batch_delay_milliseconds: int = _leaf(50, _Int(1, 5000))


@dataclass(frozen=True, slots=True, kw_only=True)
class ExpiredMessageCleanerSettings:
    processing_interval_seconds: int = _leaf(60, _Int(5, 3600))
    batch_size: int = _leaf(500, _Int(1, 10000))
    saturated_batch_delay_milliseconds: int = _leaf(50, _Int(1, 5000))


@dataclass(frozen=True, slots=True, kw_only=True)
class StateMetricsCollectorSettings:
    collection_interval_seconds: int = _leaf(15, _Int(5, 3600))
    leadership_retry_interval_seconds: int = _leaf(15, _Int(5, 300))


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueWorkerSettings:
    dead_letter_message_cleaner: DeadLetterMessageCleanerSettings = field(
        default_factory=DeadLetterMessageCleanerSettings
    )
    expired_message_cleaner: ExpiredMessageCleanerSettings = field(
        default_factory=ExpiredMessageCleanerSettings
    )
    state_metrics_collector: StateMetricsCollectorSettings = field(
        default_factory=StateMetricsCollectorSettings
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerSettings:
    shutdown_timeout_seconds: int = _leaf(30, _Int(1, 300))
    management: ManagementSettings = field(default_factory=ManagementSettings)
    queue: QueueWorkerSettings = field(default_factory=QueueWorkerSettings)


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthSettings:
    enabled: bool = _leaf(False, _Bool())
    tokens: tuple[Token, ...] = _leaf((), _Tokens())


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """Every setting of SPEC §2. ``Settings()`` (or ``Settings.defaults()``) is the
    built-in defaults; use ``load_settings`` or ``build_settings`` for anything else."""

    environment: str = _leaf("local", _Choice(ENVIRONMENTS))
    http: HttpSettings = field(default_factory=HttpSettings)
    logging: LoggingSettings = field(default_factory=LoggingSettings)
    telemetry: TelemetrySettings = field(default_factory=TelemetrySettings)
    cache: CacheSettings = field(default_factory=CacheSettings)
    database: DatabaseSettings = field(default_factory=DatabaseSettings)
    worker: WorkerSettings = field(default_factory=WorkerSettings)
    auth: AuthSettings = field(default_factory=AuthSettings)

    @classmethod
    def defaults(cls) -> Settings:
        return cls()


@dataclass(frozen=True, slots=True)
class LoadedSettings:
    settings: Settings
    # Not errors, but worth a log line at startup (unknown RETSU_ variables, ...).
    warnings: tuple[str, ...] = ()
    # The YAML file that was read, if any.
    config_path: Path | None = None


# --- schema -------------------------------------------------------------------------------

_Path = tuple[str, ...]


def _walk(cls: type[Any], prefix: _Path = ()) -> Iterator[tuple[_Path, _Leaf | None]]:
    """Every section (checker None) and leaf of the tree, in declaration order."""
    for item in dataclasses.fields(cls):
        path = (*prefix, item.name)
        if dataclasses.is_dataclass(item.default_factory):
            yield path, None
            yield from _walk(item.default_factory, path)
        else:
            yield path, item.metadata["leaf"]


_SCHEMA: Final[dict[_Path, _Leaf | None]] = dict(_walk(Settings))
_LEAVES: Final[dict[_Path, _Leaf]] = {p: c for p, c in _SCHEMA.items() if c is not None}


def env_var_name(path: str) -> str:
    """``cache.distributed.url`` → ``RETSU_CACHE__DISTRIBUTED__URL``."""
    return ENV_PREFIX + "__".join(part.upper() for part in path.split("."))


_ENV_NAMES: Final[dict[str, _Path]] = {env_var_name(".".join(p)): p for p in _LEAVES}


def setting_paths() -> tuple[str, ...]:
    """Dotted paths of every leaf setting, in table order (for docs and tests)."""
    return tuple(".".join(path) for path in _LEAVES)


def _suggest(word: str, candidates: Iterator[str] | tuple[str, ...] | list[str]) -> str:
    match = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.75)
    return f" (did you mean {match[0]}?)" if match else ""


# --- sources ------------------------------------------------------------------------------


class _YamlLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans (only true/false) and duplicate-key detection.

    Under YAML 1.1 `filter: off` would arrive as False and `environment: no` as a bool.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: set[Hashable] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, Hashable):
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r}", key_node.start_mark
                    )
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


_BOOL_TAG = "tag:yaml.org,2002:bool"
_YamlLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _BOOL_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_YamlLoader.add_implicit_resolver(
    _BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


@dataclass(frozen=True, slots=True)
class _Value:
    raw: object
    source: str  # "in <file>", "from RETSU_X", or "" for build_settings overrides
    from_env: bool


def _fail(path: str, message: str, source: str) -> ConfigError:
    suffix = f" ({source})" if source else ""
    return ConfigError(f"{path}: {message}{suffix}", setting=path, source=source or None)


def _flatten(data: object, source: str, prefix: _Path = ()) -> dict[_Path, _Value]:
    """Map a nested YAML mapping onto leaf paths, rejecting unknown keys and bad shapes."""
    where = ".".join(prefix)
    if data is None:  # `http:` with every child commented out
        return {}
    if not isinstance(data, dict):
        if not prefix:
            suffix = f" ({source})" if source else ""
            raise ConfigError(f"the top level must be a mapping of settings{suffix}")
        raise _fail(where, f"must be a mapping, got {_describe(data)}", source)
    values: dict[_Path, _Value] = {}
    siblings = {p[-1]: ".".join(p) for p in _SCHEMA if p[:-1] == prefix}
    for key, child in data.items():
        if not isinstance(key, str):
            name = f"{where}.{key}" if where else str(key)
            raise _fail(name, "setting names must be strings", source)
        path = (*prefix, key)
        dotted = ".".join(path)
        if path not in _SCHEMA:
            match = difflib.get_close_matches(key, list(siblings), n=1, cutoff=0.75)
            hint = f" (did you mean {siblings[match[0]]}?)" if match else ""
            raise _fail(dotted, f"unknown setting{hint}", source)
        if _SCHEMA[path] is None:
            values.update(_flatten(child, source, path))
        else:
            values[path] = _Value(child, source, from_env=False)
    return values


def _read_yaml(path: Path) -> dict[_Path, _Value]:
    source = f"in {path}"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a config file") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not valid UTF-8") from None
    except OSError as error:
        raise ConfigError(f"{path}: cannot read config file: {error.strerror}") from None
    try:
        # The loader class is a SafeLoader: no arbitrary objects.
        data = yaml.load(text, Loader=_YamlLoader)
    except yaml.MarkedYAMLError as error:
        # Only the problem and its position: the snippet yaml would print may hold a secret.
        mark = error.problem_mark
        position = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}: invalid YAML{position}: {error.problem}") from None
    except yaml.YAMLError:
        raise ConfigError(f"{path}: invalid YAML") from None
    return _flatten(data, source)


def _read_env(env: Mapping[str, str]) -> tuple[dict[_Path, _Value], list[str]]:
    values: dict[_Path, _Value] = {}
    warnings: list[str] = []
    for name in sorted(env):
        if not name.startswith(ENV_PREFIX):
            continue
        path = _ENV_NAMES.get(name)
        if path is None:
            hint = _suggest(name, list(_ENV_NAMES))
            warnings.append(f"unknown environment variable {name} ignored{hint}")
        else:
            values[path] = _Value(env[name], f"from {name}", from_env=True)
    return values, warnings


def _build(cls: type[_S], values: Mapping[_Path, object], prefix: _Path = ()) -> _S:
    kwargs: dict[str, object] = {}
    for item in dataclasses.fields(cls):  # type: ignore[arg-type]
        path = (*prefix, item.name)
        if dataclasses.is_dataclass(item.default_factory):
            kwargs[item.name] = _build(item.default_factory, values, path)
        elif path in values:
            kwargs[item.name] = values[path]
    return cls(**kwargs)


def _check(value: _Value, path: _Path) -> object:
    checker = _LEAVES[path]
    try:
        if value.from_env:
            assert isinstance(value.raw, str)
            return checker.from_env(value.raw)
        return checker.from_yaml(value.raw)
    except _Invalid as error:
        raise _fail(".".join(path) + error.where, error.message, value.source) from None


def _assemble(*layers: Mapping[_Path, _Value]) -> tuple[Settings, list[str]]:
    """Validate every value of every layer (a bad YAML value is an error even when an env
    var overrides it), then let later layers win."""
    checked: dict[_Path, object] = {}
    for layer in layers:
        for path in _LEAVES:
            if path in layer:
                checked[path] = _check(layer[path], path)
    settings = _build(Settings, checked)

    warnings: list[str] = []
    if settings.auth.enabled and not settings.auth.tokens:
        # Allowed by the table (tokens default to []): every /v1 call then gets 401.
        warnings.append(
            "auth.enabled is true but auth.tokens is empty: every /v1 request will be refused"
        )
    if settings.auth.tokens and not settings.auth.enabled:
        warnings.append("auth.tokens are configured but auth.enabled is false: no auth")
    return settings, warnings


# --- public API ---------------------------------------------------------------------------


def load_settings(
    config_path: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> LoadedSettings:
    """Defaults, then YAML, then ``RETSU_*`` variables; later wins.

    ``config_path`` (``--config``) makes that file required; without it,
    ``config/retsu.yaml`` under ``cwd`` is read when present. ``env`` defaults to
    ``os.environ`` and ``cwd`` to the working directory; tests pass both.
    Raises ConfigError.
    """
    base = Path.cwd() if cwd is None else Path(cwd)
    path: Path | None
    if config_path is not None:
        path = Path(config_path)
        path = path if path.is_absolute() else base / path
        if not path.exists():
            raise ConfigError(f"{path}: config file not found")
    else:
        path = base / DEFAULT_CONFIG_FILE
        if not path.exists():
            path = None
    from_yaml = _read_yaml(path) if path is not None else {}
    from_env, warnings = _read_env(os.environ if env is None else env)
    settings, more = _assemble(from_yaml, from_env)
    return LoadedSettings(settings=settings, warnings=(*warnings, *more), config_path=path)


def build_settings(overrides: Mapping[str, Any] | None = None) -> Settings:
    """Defaults plus a nested mapping shaped like the YAML file, validated the same way.

    For tests and tools: ``build_settings({"http": {"port": 3000}})``.
    """
    settings, _ = _assemble(_flatten(dict(overrides or {}), ""))
    return settings


_USERINFO_PASSWORD: Final = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*://[^:@/?#]*:)[^?#]*@")
_QUERY_PASSWORD: Final = re.compile(r"(?i)([?&](?:password|passwd)=)[^&#]*")


def redacted_url(url: str) -> str:
    """The URL with any password replaced by ``***``, for logs and reprs.

    ``postgresql://retsu:s3cret@db:5432/retsu`` → ``postgresql://retsu:***@db:5432/retsu``;
    a ``password=`` query parameter is masked too.
    """
    # Up to the last '@' of the URL: an unescaped '@' inside a password must not leak its tail.
    return _QUERY_PASSWORD.sub(r"\1***", _USERINFO_PASSWORD.sub(r"\1***@", url))
