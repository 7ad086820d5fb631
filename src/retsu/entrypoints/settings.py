"""Configuration (SPEC §2): built-in defaults, then YAML, then ``RETSU_*`` variables.

The settings tree is declared once, below, as frozen msgspec Structs whose constraints are
``Meta`` annotations; msgspec validates every layer against it. Attribute paths mirror the YAML
keys: ``settings.cache.distributed.url`` is ``cache: {distributed: {url: …}}`` in YAML and
``RETSU_CACHE__DISTRIBUTED__URL`` in the environment.

Errors are one line, name the setting and where the value came from, and never echo a
secret (URLs, token secrets): those values are described, not quoted.
"""

from __future__ import annotations

import contextlib
import difflib
import ipaddress
import json
import os
import re
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Final, Literal, Self, get_args, get_type_hints
from urllib.parse import urlsplit

import msgspec
import yaml
from msgspec import Meta, Struct, field
from msgspec import inspect as schema

from retsu.adapters.postgres.hosts import SCHEMES, check_url
from retsu.adapters.telemetry.logging import LogFilterError, parse_log_filter

__all__ = [
    "DEFAULT_CONFIG_FILE",
    "ENV_PREFIX",
    "SCOPES",
    "ConfigError",
    "LoadedSettings",
    "PostgresUrl",
    "Settings",
    "Token",
    "build_settings",
    "env_var_name",
    "load_settings",
    "redacted_url",
    "setting_paths",
]

DEFAULT_CONFIG_FILE: Final = Path("config") / "retsu.yaml"
ENV_PREFIX: Final = "RETSU_"
SCOPES: Final = frozenset({"messages", "read", "admin"})


class ConfigError(Exception):
    """Bad configuration. ``str(error)`` is one human-readable line that names the setting
    (``http.port: must be between 1 and 65535, got 0 (from RETSU_HTTP__PORT)``)."""

    def __init__(self, message: str, *, setting: str | None = None, source: str | None = None):
        # One line, whatever the parts contained.
        super().__init__(re.sub(r"\s*[\r\n]+\s*", " ", message))
        self.setting = setting
        self.source = source


def _describe(value: object, *, secret: bool = False) -> str:
    """A short rendering of a value for an error message; only its kind when it may be a
    secret."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return ("true" if value else "false") if not secret else "a boolean"
    if isinstance(value, int | float):
        return repr(value) if not secret else "a number"
    if isinstance(value, str):
        if secret:
            return "a string"
        return repr(value if len(value) <= 60 else value[:57] + "...")
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


# --- values msgspec has no constraint for (parsed by _decode_hook) --------------------------


class _Checked(str):
    """A string checked by ``parse`` when msgspec decodes it (see ``_decode_hook``)."""

    __slots__ = ()

    @classmethod
    def parse(cls, value: object) -> Self:
        raise NotImplementedError


class IPAddress(_Checked):
    __slots__ = ()

    @classmethod
    def parse(cls, value: object) -> Self:
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                ipaddress.ip_address(value)
                return cls(value)
        raise ValueError(f"must be an IP address, got {_describe(value)}")


class LogFilterText(_Checked):
    """``logging.filter``: checked by the same parser that applies it."""

    __slots__ = ()

    @classmethod
    def parse(cls, value: object) -> Self:
        if not isinstance(value, str):
            raise ValueError(f"must be a string such as 'info,retsu=debug', got {_describe(value)}")
        try:
            parse_log_filter(value)
        except LogFilterError as error:
            context = f" in {_describe(value)}" if value.strip() else ""
            raise ValueError(f"{error}{context}") from None
        return cls(value.strip())


_SCHEME: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*")


class _Url(_Checked):
    """A URL with one of ``schemes``. Never echoed in an error: it may hold a password."""

    __slots__ = ()
    schemes: ClassVar[tuple[str, ...]]
    example: ClassVar[str]
    host_required: ClassVar[bool] = True

    @classmethod
    def parse(cls, value: object) -> Self:
        if not isinstance(value, str):
            raise ValueError(f"must be a URL string, got {_describe(value, secret=True)}")
        scheme, sep, _ = value.partition("://")
        if not sep or not _SCHEME.fullmatch(scheme):
            raise ValueError(f"must be a URL such as {cls.example}")
        if scheme.lower() not in cls.schemes:
            raise ValueError(f"scheme must be one of {', '.join(cls.schemes)}, got {scheme!r}")
        if any(char.isspace() for char in value):
            raise ValueError("must not contain whitespace")
        cls._check_parts(value)
        return cls(value)

    @classmethod
    def _check_parts(cls, value: str) -> None:
        scheme = value.partition("://")[0]
        try:
            parts = urlsplit(value)
        except ValueError:  # e.g. an unclosed IPv6 bracket
            raise ValueError("is not a valid URL") from None
        try:
            parts.port  # noqa: B018 -- property access validates the port
        except ValueError:
            raise ValueError("has an invalid port") from None
        if scheme.lower() == "unix":
            if not parts.path:
                raise ValueError("must name a socket path, e.g. unix:///run/redis.sock")
        elif cls.host_required and not parts.hostname:
            raise ValueError(f"must name a host, e.g. {cls.example}")


class PostgresUrl(_Url):
    """libpq's URL: one host, a socket (``postgresql:///retsu?host=/run/pg``), or several
    hosts tried in turn (``postgresql://h1:5432,h2:5432/retsu?target_session_attrs=
    read-write``; SPEC §10) — checked by the code that connects with it."""

    __slots__ = ()
    schemes = SCHEMES
    example = "postgresql://user:password@127.0.0.1:5432/retsu"

    @classmethod
    def _check_parts(cls, value: str) -> None:
        try:
            check_url(value)  # its errors never quote the URL
        except ValueError as error:
            raise ValueError(str(error)) from None


class RedisUrl(_Url):
    __slots__ = ()
    schemes = ("redis", "rediss", "unix")
    example = "redis://127.0.0.1:6379"


class OtlpUrl(_Url):
    __slots__ = ()
    schemes = ("http", "https")
    example = "http://127.0.0.1:4317"


def _decode_hook(kind: type, value: object) -> object:
    if isinstance(kind, type) and issubclass(kind, _Checked):
        return kind.parse(value)
    raise NotImplementedError


# --- the settings tree (SPEC §2) ---------------------------------------------------------


class _Section(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A mapping of settings. Its repr masks URL passwords."""

    def __repr__(self) -> str:
        fields = ", ".join(
            f"{name}={_shown(getattr(self, name))}" for name in self.__struct_fields__
        )
        return f"{type(self).__name__}({fields})"


def _shown(value: object) -> str:
    return repr(redacted_url(value)) if isinstance(value, str) else repr(value)


class HttpSettings(_Section, frozen=True):
    bind_address: IPAddress = IPAddress("127.0.0.1")
    port: Annotated[int, Meta(ge=1, le=65535)] = 2424
    workers: Annotated[int, Meta(ge=1, le=64)] = 1
    # Request bounds (docs/configuration.md, "HTTP limits").
    max_header_bytes: Annotated[int, Meta(ge=1024, le=1_048_576)] = 32_768
    max_headers: Annotated[int, Meta(ge=10, le=1000)] = 100
    header_timeout_seconds: Annotated[int, Meta(ge=1, le=300)] = 10
    body_timeout_seconds: Annotated[int, Meta(ge=1, le=600)] = 30
    keep_alive_timeout_seconds: Annotated[int, Meta(ge=1, le=300)] = 5


class LoggingSettings(_Section, frozen=True):
    filter: LogFilterText = LogFilterText("warn")
    format: Literal["pretty", "json"] = "pretty"


class MetricsSettings(_Section, frozen=True):
    max_queues: Annotated[int, Meta(ge=1, le=100_000)] = 10_000


class TracesSettings(_Section, frozen=True):
    enabled: bool = False
    endpoint: OtlpUrl = OtlpUrl("http://127.0.0.1:4317")
    timeout_seconds: Annotated[int, Meta(ge=1, le=60)] = 5


class TelemetrySettings(_Section, frozen=True):
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    traces: TracesSettings = field(default_factory=TracesSettings)


class QueueNamesRegionSettings(_Section, frozen=True):
    max_entries: Annotated[int, Meta(ge=1, le=1_000_000)] = 10_000
    max_capacity_bytes: Annotated[int, Meta(ge=1, le=4_294_967_295)] = 8_388_608


class RegionsSettings(_Section, frozen=True):
    queue_names: QueueNamesRegionSettings = field(default_factory=QueueNamesRegionSettings)


class InMemoryCacheSettings(_Section, frozen=True):
    enabled: bool = True
    regions: RegionsSettings = field(default_factory=RegionsSettings)


class DistributedCacheSettings(_Section, frozen=True):
    enabled: bool = True
    url: RedisUrl = RedisUrl("redis://127.0.0.1:6379")
    connection_timeout_milliseconds: Annotated[int, Meta(ge=1, le=10_000)] = 500
    command_timeout_milliseconds: Annotated[int, Meta(ge=1, le=10_000)] = 20


class CacheSettings(_Section, frozen=True):
    in_memory: InMemoryCacheSettings = field(default_factory=InMemoryCacheSettings)
    distributed: DistributedCacheSettings = field(default_factory=DistributedCacheSettings)


class DatabaseSettings(_Section, frozen=True):
    # None: not configured. Every role but `dev` refuses to start without it (the CLI
    # enforces that, since only it knows the role).
    url: PostgresUrl | None = None
    # For what needs a session (advisory lock, LISTEN, migrations) behind a transaction
    # pooler; None: the same as url.
    session_url: PostgresUrl | None = None
    # What database.url points at (docs/configuration.md, "Behind a connection pooler"):
    # transaction = a transaction-mode pooler (PgBouncer), so nothing may outlive a
    # transaction; none = PostgreSQL itself, or a session-mode pooler; auto = transaction
    # exactly when session_url is set to another URL than url.
    pooler: Literal["auto", "none", "transaction"] = "auto"
    # SPEC says only "≥ 1": any positive 32-bit count (PostgreSQL's own max_connections is
    # the real limit; see docs/operations.md).
    max_connections: Annotated[int, Meta(ge=1, le=2_147_483_647)] = 10
    acquire_timeout_seconds: Annotated[int, Meta(ge=5, le=60)] = 5

    @property
    def transaction_pooler(self) -> bool:
        """Whether ``url`` leads to a transaction-mode pooler (``pooler``, resolved)."""
        if self.pooler == "auto":
            return self.session_url is not None and self.session_url != self.url
        return self.pooler == "transaction"

    @property
    def session(self) -> PostgresUrl | None:
        """The URL of what needs a session of its own: ``session_url``, else ``url``."""
        return self.session_url if self.session_url is not None else self.url


class ManagementSettings(_Section, frozen=True):
    bind_address: IPAddress = IPAddress("127.0.0.1")
    port: Annotated[int, Meta(ge=1, le=65535)] = 24247


class DeadLetterMessageCleanerSettings(_Section, frozen=True):
    retention_seconds: Annotated[int, Meta(ge=3600, le=31_536_000)] = 1_209_600
    processing_interval_seconds: Annotated[int, Meta(ge=5, le=3600)] = 60
    batch_size: Annotated[int, Meta(ge=1, le=10_000)] = 500
    saturated_batch_delay_milliseconds: Annotated[int, Meta(ge=1, le=5000)] = 50


class ExpiredMessageCleanerSettings(_Section, frozen=True):
    processing_interval_seconds: Annotated[int, Meta(ge=5, le=3600)] = 60
    batch_size: Annotated[int, Meta(ge=1, le=10_000)] = 500
    saturated_batch_delay_milliseconds: Annotated[int, Meta(ge=1, le=5000)] = 50


class StateMetricsCollectorSettings(_Section, frozen=True):
    collection_interval_seconds: Annotated[int, Meta(ge=5, le=3600)] = 15
    leadership_retry_interval_seconds: Annotated[int, Meta(ge=5, le=300)] = 15


class QueueWorkerSettings(_Section, frozen=True):
    dead_letter_message_cleaner: DeadLetterMessageCleanerSettings = field(
        default_factory=DeadLetterMessageCleanerSettings
    )
    expired_message_cleaner: ExpiredMessageCleanerSettings = field(
        default_factory=ExpiredMessageCleanerSettings
    )
    state_metrics_collector: StateMetricsCollectorSettings = field(
        default_factory=StateMetricsCollectorSettings
    )


class WorkerSettings(_Section, frozen=True):
    shutdown_timeout_seconds: Annotated[int, Meta(ge=1, le=300)] = 30
    management: ManagementSettings = field(default_factory=ManagementSettings)
    queue: QueueWorkerSettings = field(default_factory=QueueWorkerSettings)


class _Invalid(ValueError):
    """A rule broken by one field of a struct: msgspec reports it at the struct's path, so
    the message carries the rest (``tokens[1].name: …``)."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}\x00{message}")


class Token(Struct, frozen=True, forbid_unknown_fields=True):
    """An API token (SPEC §3.5). ``name`` is the audit actor; ``secret`` never appears in a
    repr, an error or a log line."""

    name: Annotated[str, Meta(min_length=1)]
    secret: Annotated[str, Meta(min_length=1)]
    scopes: Annotated[frozenset[str], Meta(min_length=1)]

    def __post_init__(self) -> None:
        # Rules that need their own words (a regex in Meta would be echoed as the message).
        if len(self.name) > 128 or not self.name.isprintable() or not self.name.strip():
            raise _Invalid("name", "must be at most 128 printable characters")
        if not all("!" <= char <= "~" for char in self.secret):
            # It travels in an `authorization: Bearer` header; anything else never matches.
            raise _Invalid("secret", "must contain only visible ASCII characters")
        if unknown := sorted(self.scopes - SCOPES):
            raise _Invalid(
                "scopes", f"unknown scope {unknown[0]!r} (expected admin, messages or read)"
            )

    def __repr__(self) -> str:
        return f"Token(name={self.name!r}, scopes={sorted(self.scopes)!r})"


class AuthSettings(_Section, frozen=True):
    enabled: bool = False
    tokens: tuple[Token, ...] = ()

    def __post_init__(self) -> None:
        names: dict[str, int] = {}
        secrets: dict[str, int] = {}
        for index, token in enumerate(self.tokens):
            if token.name in names:
                raise _Invalid(
                    f"tokens[{index}].name",
                    f"duplicates the name of auth.tokens[{names[token.name]}]",
                )
            # Two tokens with one secret would make the audit actor ambiguous.
            if token.secret in secrets:
                raise _Invalid(
                    f"tokens[{index}].secret",
                    f"duplicates the secret of auth.tokens[{secrets[token.secret]}]",
                )
            names[token.name] = secrets[token.secret] = index


class ConsoleSettings(_Section, frozen=True):
    enabled: bool = True


class Settings(_Section, frozen=True):
    """Every setting of SPEC §2. ``Settings()`` (or ``Settings.defaults()``) is the
    built-in defaults; use ``load_settings`` or ``build_settings`` for anything else."""

    environment: Literal["local", "test", "staging", "production"] = "local"
    http: HttpSettings = field(default_factory=HttpSettings)
    logging: LoggingSettings = field(default_factory=LoggingSettings)
    telemetry: TelemetrySettings = field(default_factory=TelemetrySettings)
    cache: CacheSettings = field(default_factory=CacheSettings)
    database: DatabaseSettings = field(default_factory=DatabaseSettings)
    worker: WorkerSettings = field(default_factory=WorkerSettings)
    auth: AuthSettings = field(default_factory=AuthSettings)
    console: ConsoleSettings = field(default_factory=ConsoleSettings)

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


# --- the schema, read back from the declarations ------------------------------------------

_Path = tuple[str, ...]


def _leaves(struct: type[Struct], prefix: _Path = ()) -> Iterator[tuple[_Path, schema.Type]]:
    info = schema.type_info(struct)
    assert isinstance(info, schema.StructType)
    for item in info.fields:
        path = (*prefix, item.name)
        kind = item.type
        if isinstance(kind, schema.StructType) and issubclass(kind.cls, _Section):
            yield from _leaves(kind.cls, path)
        else:
            yield path, kind.type if isinstance(kind, schema.Metadata) else kind


_LEAVES: Final[dict[_Path, schema.Type]] = dict(_leaves(Settings))
_SECTIONS: Final = frozenset(leaf[:end] for leaf in _LEAVES for end in range(1, len(leaf)))


def env_var_name(path: str) -> str:
    """``cache.distributed.url`` → ``RETSU_CACHE__DISTRIBUTED__URL``."""
    return ENV_PREFIX + "__".join(part.upper() for part in path.split("."))


_ENV_NAMES: Final[dict[str, _Path]] = {env_var_name(".".join(p)): p for p in _LEAVES}


def setting_paths() -> tuple[str, ...]:
    """Dotted paths of every leaf setting, in table order (for docs and tests)."""
    return tuple(".".join(path) for path in _LEAVES)


def _suggest(word: str, candidates: list[str]) -> str:
    match = difflib.get_close_matches(word, candidates, n=1, cutoff=0.75)
    return f" (did you mean {match[0]}?)" if match else ""


def _is(kind: schema.Type, *types: type) -> bool:
    """Whether ``kind`` (or the non-null member of an optional) is one of ``types``."""
    if isinstance(kind, schema.UnionType):
        return any(_is(member, *types) for member in kind.types)
    return isinstance(kind, types)


# --- turning msgspec's errors into one line that names the setting -------------------------

_AT: Final = re.compile(r"^(?P<message>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)
_UNKNOWN: Final = re.compile(r"^Object contains unknown field `(?P<key>[^`]*)`$")
_MISSING: Final = re.compile(r"^Object missing required field `(?P<key>[^`]*)`$")
_STEP: Final = re.compile(r"\.([^.\[]+)|\[(\d+)\]")


def _steps(path: str) -> list[str | int]:
    return [name if name else int(index) for name, index in _STEP.findall(path)]


def _dotted(steps: list[str | int]) -> str:
    text = "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in steps)
    return text.lstrip(".")


def _raw_at(data: object, steps: list[str | int]) -> object:
    for step in steps:
        try:
            data = data[step]  # type: ignore[index]
        except (TypeError, KeyError, IndexError):
            return None
    return data


def _kind_at(steps: list[str | int]) -> schema.Type:
    kind: schema.Type = schema.type_info(Settings)
    for step in steps:
        while isinstance(kind, schema.Metadata | schema.UnionType):
            kind = (
                kind.type
                if isinstance(kind, schema.Metadata)
                else next(t for t in kind.types if not isinstance(t, schema.NoneType))
            )
        if isinstance(step, str) and isinstance(kind, schema.StructType):
            kind = next(f.type for f in kind.fields if f.name == step)
        elif isinstance(kind, schema.VarTupleType | schema.SetType | schema.FrozenSetType):
            kind = kind.item_type
    return kind


_SECRET_PARENTS: Final = ("auth.tokens",)


def _explain(error: msgspec.ValidationError, raw: object) -> tuple[str, str]:
    """``(setting path, message)`` for a msgspec error on the tree ``raw`` was decoded from."""
    match = _AT.match(str(error))
    assert match is not None
    message, steps = match["message"], _steps(match["path"] or "")
    where = _dotted(steps)
    if "\x00" in message:  # an _Invalid from a struct's own rules
        more, message = message.split("\x00", 1)
        return f"{where}.{more}" if where else more, message
    if unknown := _UNKNOWN.match(message):
        key = unknown["key"]
        parent = _kind_at(steps)
        assert isinstance(parent, schema.StructType)
        siblings = [f.name for f in parent.fields]
        if issubclass(parent.cls, _Section):
            prefix = f"{where}." if where else ""
            hint = _suggest(key, siblings)
            hint = hint.replace("mean ", f"mean {prefix}") if hint else ""
            return f"{prefix}{key}", f"unknown setting{hint}"
        return f"{where}.{key}", f"unknown key{_suggest(key, siblings)}"
    if missing := _MISSING.match(message):
        return f"{where}.{missing['key']}", "is required"
    kind, value = _kind_at(steps), _raw_at(raw, steps)
    got = f"got {_describe(value, secret=where.startswith(_SECRET_PARENTS))}"
    if not where:
        return "", "the top level must be a mapping of settings"
    if isinstance(kind, schema.IntType):
        if isinstance(value, bool) or not isinstance(value, int):
            return where, f"must be an integer, {got}"
        return where, f"must be between {kind.ge} and {kind.le}, {got}"
    if isinstance(kind, schema.BoolType):
        return where, f"must be a boolean (true or false), {got}"
    if isinstance(kind, schema.LiteralType):
        parent = _kind_at(steps[:-1])
        assert isinstance(parent, schema.StructType) and isinstance(steps[-1], str)
        choices = get_args(get_type_hints(parent.cls)[steps[-1]])  # in declaration order
        return where, f"must be one of {', '.join(choices)}, {got}"
    if isinstance(kind, schema.StrType):
        return where, f"must be a non-empty string, {got}"
    if isinstance(kind, schema.FrozenSetType):
        return where, f"must be a non-empty list of scopes (admin, messages, read), {got}"
    if isinstance(kind, schema.VarTupleType):
        return where, f"must be a list of {{name, secret, scopes}} objects, {got}"
    if isinstance(kind, schema.StructType) and kind.cls is Token:
        return where, f"must be a {{name, secret, scopes}} object, {got}"
    if isinstance(kind, schema.StructType):
        return where, f"must be a mapping, {got}"
    return where, message  # a _Checked value's own words


# --- sources ------------------------------------------------------------------------------


class _YamlLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans (only true/false) and duplicate-key detection,
    neither of which PyYAML offers as an option.

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
# The YAML 1.1 boolean words our loader keeps as strings: boolean settings accept them back.
_YAML_BOOLEANS: Final = {"yes": True, "on": True, "no": False, "off": False}


def _read_yaml(path: Path) -> object:
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
        return yaml.load(text, Loader=_YamlLoader)
    except yaml.MarkedYAMLError as error:
        # Only the problem and its position: the snippet yaml would print may hold a secret.
        mark = error.problem_mark
        position = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}: invalid YAML{position}: {error.problem}") from None
    except yaml.YAMLError:
        raise ConfigError(f"{path}: invalid YAML") from None


def _cleaned(data: object, source: str, prefix: _Path = ()) -> object:
    """The file's tree as msgspec should see it: `http:` with every child commented out is
    an empty section, not a null one; YAML 1.1 boolean words are booleans where a boolean
    setting expects one; a key that is not a string is an error."""
    if isinstance(data, list):
        return [_cleaned(item, source, (*prefix, f"[{index}]")) for index, item in enumerate(data)]
    if not isinstance(data, dict):
        return data
    cleaned: dict[str, object] = {}
    for key, child in data.items():
        if not isinstance(key, str):
            where = ".".join((*prefix, str(key))).replace(".[", "[")
            raise _fail(where, "setting names must be strings", source)
        path = (*prefix, key)
        kind = _LEAVES.get(path)
        if child is None and (path in _SECTIONS or (kind and _is(kind, schema.VarTupleType))):
            continue
        if kind is not None and _is(kind, schema.BoolType) and isinstance(child, str):
            child = _YAML_BOOLEANS.get(child.lower(), child)
        cleaned[key] = _cleaned(child, source, path)
    return cleaned


_ENV_INT: Final = re.compile(r"[+-]?[0-9]{1,30}")
_ENV_BOOLEANS: Final = {**_YAML_BOOLEANS, "true": True, "1": True, "false": False, "0": False}


def _from_env(kind: schema.Type, text: str) -> object:
    """An environment variable's text as the value its setting's type expects."""
    word = text.strip()
    if _is(kind, schema.IntType):
        if not _ENV_INT.fullmatch(word):
            raise ValueError(f"must be an integer, got {_describe(text)}")
        return int(word)
    if _is(kind, schema.BoolType):
        if word.lower() not in _ENV_BOOLEANS:
            raise ValueError(
                f"must be a boolean (true/false, 1/0, yes/no, on/off), got {_describe(text)}"
            )
        return _ENV_BOOLEANS[word.lower()]
    if _is(kind, schema.VarTupleType):
        if not word:
            return []
        try:
            return json.loads(text)
        except json.JSONDecodeError as error:
            # The decoder's message holds a position, never the document.
            raise ValueError(
                f"must be a JSON list of {{name, secret, scopes}} objects "
                f"({error.msg} at line {error.lineno} column {error.colno})"
            ) from None
    if _is(kind, schema.NoneType) and not word:
        return None  # an empty variable unsets an optional URL (handy in compose files)
    return word


def _read_env(env: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
    """The ``RETSU_*`` variables as a nested mapping, and warnings about the unknown ones
    (named, never their values)."""
    tree: dict[str, Any] = {}
    warnings: list[str] = []
    for name in sorted(env):
        if not name.startswith(ENV_PREFIX):
            continue
        path = _ENV_NAMES.get(name)
        if path is None:
            hint = _suggest(name, list(_ENV_NAMES))
            warnings.append(f"unknown environment variable {name} ignored{hint}")
            continue
        try:
            value = _from_env(_LEAVES[path], env[name])
        except ValueError as error:
            raise _fail(".".join(path), str(error), f"from {name}") from None
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return tree, warnings


def _fail(path: str, message: str, source: str) -> ConfigError:
    suffix = f" ({source})" if source else ""
    where = f"{path}: " if path else ""
    return ConfigError(f"{where}{message}{suffix}", setting=path or None, source=source or None)


def _merge(base: object, top: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base) if isinstance(base, dict) else {}
    for key, value in top.items():
        below = merged.get(key)
        merged[key] = _merge(below, value) if isinstance(value, dict) else value
    return merged


def _decode(raw: object, source: Callable[[str], str]) -> Settings:
    try:
        return msgspec.convert(raw, Settings, dec_hook=_decode_hook)
    except msgspec.ValidationError as error:
        path, message = _explain(error, raw)
        raise _fail(path, message, source(path)) from None


def _assemble(from_file: object, file_source: str, env: Mapping[str, str]) -> LoadedSettings:
    """Each layer is validated on its own (a bad file value is an error even when an env
    var overrides it), then the environment wins."""
    from_file = {} if from_file is None else _cleaned(from_file, file_source)
    _decode(from_file, lambda _: file_source)
    from_env, warnings = _read_env(env)
    # `auth.tokens[1].name` was set by RETSU_AUTH__TOKENS.
    _decode(from_env, lambda path: f"from {env_var_name(path.split('[')[0])}")
    settings = _decode(_merge(from_file, from_env), lambda _: "")
    if settings.auth.enabled and not settings.auth.tokens:
        # Allowed by the table (tokens default to []): every /v1 call then gets 401.
        warnings.append(
            "auth.enabled is true but auth.tokens is empty: every /v1 request will be refused"
        )
    if settings.auth.tokens and not settings.auth.enabled:
        warnings.append("auth.tokens are configured but auth.enabled is false: no auth")
    return LoadedSettings(settings=settings, warnings=tuple(warnings))


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
    from_file = _read_yaml(path) if path is not None else None
    loaded = _assemble(from_file, f"in {path}", os.environ if env is None else env)
    return LoadedSettings(loaded.settings, loaded.warnings, config_path=path)


def build_settings(overrides: Mapping[str, Any] | None = None) -> Settings:
    """Defaults plus a nested mapping shaped like the YAML file, validated the same way.

    For tests and tools: ``build_settings({"http": {"port": 3000}})``.
    """
    return _assemble(dict(overrides or {}), "", {}).settings


_USERINFO_PASSWORD: Final = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*://[^:@/?#]*:)[^?#]*@")
_QUERY_PASSWORD: Final = re.compile(r"(?i)([?&](?:password|passwd)=)[^&#]*")


def redacted_url(url: str) -> str:
    """The URL with any password replaced by ``***``, for logs and reprs.

    ``postgresql://retsu:s3cret@db:5432/retsu`` → ``postgresql://retsu:***@db:5432/retsu``;
    a ``password=`` query parameter is masked too.
    """
    # Up to the last '@' of the URL: an unescaped '@' inside a password must not leak its tail.
    return _QUERY_PASSWORD.sub(r"\1***", _USERINFO_PASSWORD.sub(r"\1***@", url))
