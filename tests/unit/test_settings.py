"""The configuration loader against SPEC §2: defaults, layering, validation, secrets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from retsu.entrypoints.settings import (
    ConfigError,
    LoadedSettings,
    Settings,
    Token,
    build_settings,
    env_var_name,
    load_settings,
    redacted_url,
    setting_paths,
)

# SPEC §2, row by row.
TABLE_DEFAULTS: dict[str, Any] = {
    "environment": "local",
    "http.bind_address": "127.0.0.1",
    "http.port": 2424,
    "http.workers": 1,
    "http.max_header_bytes": 32768,
    "http.max_headers": 100,
    "http.header_timeout_seconds": 10,
    "http.body_timeout_seconds": 30,
    "http.keep_alive_timeout_seconds": 5,
    "logging.filter": "warn",
    "logging.format": "pretty",
    "telemetry.metrics.max_queues": 10000,
    "telemetry.traces.enabled": False,
    "telemetry.traces.endpoint": "http://127.0.0.1:4317",
    "telemetry.traces.timeout_seconds": 5,
    "cache.in_memory.enabled": True,
    "cache.in_memory.regions.queue_names.max_entries": 10000,
    "cache.in_memory.regions.queue_names.max_capacity_bytes": 8388608,
    "cache.distributed.enabled": True,
    "cache.distributed.url": "redis://127.0.0.1:6379",
    "cache.distributed.connection_timeout_milliseconds": 500,
    "cache.distributed.command_timeout_milliseconds": 20,
    "database.url": None,
    "database.session_url": None,
    "database.pooler": "auto",
    "database.max_connections": 10,
    "database.acquire_timeout_seconds": 5,
    "worker.shutdown_timeout_seconds": 30,
    "worker.management.bind_address": "127.0.0.1",
    "worker.management.port": 24247,
    "worker.queue.dead_letter_message_cleaner.retention_seconds": 1209600,
    "worker.queue.dead_letter_message_cleaner.processing_interval_seconds": 60,
    "worker.queue.dead_letter_message_cleaner.batch_size": 500,
    "worker.queue.dead_letter_message_cleaner.saturated_batch_delay_milliseconds": 50,
    "worker.queue.expired_message_cleaner.processing_interval_seconds": 60,
    "worker.queue.expired_message_cleaner.batch_size": 500,
    "worker.queue.expired_message_cleaner.saturated_batch_delay_milliseconds": 50,
    "worker.queue.state_metrics_collector.collection_interval_seconds": 15,
    "worker.queue.state_metrics_collector.leadership_retry_interval_seconds": 15,
    "auth.enabled": False,
    "auth.tokens": (),
    "console.enabled": True,
}

# Inclusive numeric ranges from the table (database.max_connections: "≥ 1": any 32-bit count).
RANGES: dict[str, tuple[int, int]] = {
    "http.port": (1, 65535),
    "http.workers": (1, 64),
    "http.max_header_bytes": (1024, 1048576),
    "http.max_headers": (10, 1000),
    "http.header_timeout_seconds": (1, 300),
    "http.body_timeout_seconds": (1, 600),
    "http.keep_alive_timeout_seconds": (1, 300),
    "telemetry.metrics.max_queues": (1, 100000),
    "telemetry.traces.timeout_seconds": (1, 60),
    "cache.in_memory.regions.queue_names.max_entries": (1, 1000000),
    "cache.in_memory.regions.queue_names.max_capacity_bytes": (1, 4294967295),
    "cache.distributed.connection_timeout_milliseconds": (1, 10000),
    "cache.distributed.command_timeout_milliseconds": (1, 10000),
    "database.max_connections": (1, 2_147_483_647),
    "database.acquire_timeout_seconds": (5, 60),
    "worker.shutdown_timeout_seconds": (1, 300),
    "worker.management.port": (1, 65535),
    "worker.queue.dead_letter_message_cleaner.retention_seconds": (3600, 31536000),
    "worker.queue.dead_letter_message_cleaner.processing_interval_seconds": (5, 3600),
    "worker.queue.dead_letter_message_cleaner.batch_size": (1, 10000),
    "worker.queue.dead_letter_message_cleaner.saturated_batch_delay_milliseconds": (1, 5000),
    "worker.queue.expired_message_cleaner.processing_interval_seconds": (5, 3600),
    "worker.queue.expired_message_cleaner.batch_size": (1, 10000),
    "worker.queue.expired_message_cleaner.saturated_batch_delay_milliseconds": (1, 5000),
    "worker.queue.state_metrics_collector.collection_interval_seconds": (5, 3600),
    "worker.queue.state_metrics_collector.leadership_retry_interval_seconds": (5, 300),
}

BOOLEANS = (
    "telemetry.traces.enabled",
    "cache.in_memory.enabled",
    "cache.distributed.enabled",
    "auth.enabled",
    "console.enabled",
)

SECRET = "hunter2-super-secret-value"


def value_at(settings: Settings, path: str) -> Any:
    node: Any = settings
    for part in path.split("."):
        node = getattr(node, part)
    return node


def nested(path: str, value: Any) -> dict[str, Any]:
    """``nested("http.port", 1)`` → ``{"http": {"port": 1}}``."""
    tree: Any = value
    for part in reversed(path.split(".")):
        tree = {part: tree}
    return tree  # type: ignore[no-any-return]


def write_config(directory: Path, text: str, name: str = "config/retsu.yaml") -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def load(tmp_path: Path, env: dict[str, str] | None = None, **kwargs: Any) -> LoadedSettings:
    return load_settings(env=env or {}, cwd=tmp_path, **kwargs)


def error_of(tmp_path: Path, env: dict[str, str] | None = None, **kwargs: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, env, **kwargs)
    message = str(caught.value)
    assert "\n" not in message
    return message


# --- defaults and layering ----------------------------------------------------------------


def test_paths_are_exactly_the_table() -> None:
    assert list(setting_paths()) == list(TABLE_DEFAULTS)


@pytest.mark.parametrize(("path", "default"), TABLE_DEFAULTS.items())
def test_defaults_equal_the_table(path: str, default: Any) -> None:
    assert value_at(Settings.defaults(), path) == default


def test_no_file_no_env_gives_defaults(tmp_path: Path) -> None:
    loaded = load(tmp_path)
    assert loaded.settings == Settings()
    assert loaded.warnings == ()
    assert loaded.config_path is None


def test_settings_are_immutable() -> None:
    settings = Settings()
    with pytest.raises(AttributeError, match="immutable"):
        settings.http.port = 1  # type: ignore[misc]


def test_yaml_overrides_defaults(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        """
environment: staging
http:
  port: 3000
  bind_address: 0.0.0.0
logging:
  filter: info,retsu.adapters.postgres=debug
  format: json
cache:
  distributed:
    command_timeout_milliseconds: 40
    url: rediss://cache:6380/0
worker:
  queue:
    expired_message_cleaner:
      batch_size: 10
database:
  url: postgresql://retsu:pw@db:5432/retsu
""",
    )
    loaded = load(tmp_path)
    settings = loaded.settings
    assert loaded.config_path == path
    assert settings.environment == "staging"
    assert settings.http.port == 3000
    assert settings.http.bind_address == "0.0.0.0"
    assert settings.http.workers == 1  # untouched sibling keeps its default
    assert settings.logging.filter == "info,retsu.adapters.postgres=debug"
    assert settings.logging.format == "json"
    assert settings.cache.distributed.command_timeout_milliseconds == 40
    assert settings.cache.distributed.url == "rediss://cache:6380/0"
    assert settings.cache.distributed.enabled is True
    assert settings.worker.queue.expired_message_cleaner.batch_size == 10
    assert settings.database.url == "postgresql://retsu:pw@db:5432/retsu"


def test_env_overrides_yaml(tmp_path: Path) -> None:
    write_config(tmp_path, "http:\n  port: 3000\n  workers: 4\n")
    settings = load(
        tmp_path,
        {
            "RETSU_HTTP__PORT": "3001",
            "RETSU_CACHE__DISTRIBUTED__URL": "redis://cache:6379",
            "RETSU_WORKER__QUEUE__EXPIRED_MESSAGE_CLEANER__BATCH_SIZE": "10",
            "RETSU_ENVIRONMENT": "production",
        },
    ).settings
    assert settings.http.port == 3001
    assert settings.http.workers == 4
    assert settings.cache.distributed.url == "redis://cache:6379"
    assert settings.worker.queue.expired_message_cleaner.batch_size == 10
    assert settings.environment == "production"


@pytest.mark.parametrize("path", list(TABLE_DEFAULTS))
def test_every_setting_has_an_env_var(path: str) -> None:
    name = env_var_name(path)
    assert name == "RETSU_" + path.upper().replace(".", "__")


def test_env_var_name_examples() -> None:
    assert env_var_name("http.port") == "RETSU_HTTP__PORT"
    assert (
        env_var_name("cache.distributed.command_timeout_milliseconds")
        == "RETSU_CACHE__DISTRIBUTED__COMMAND_TIMEOUT_MILLISECONDS"
    )


def test_config_path_is_required(tmp_path: Path) -> None:
    message = error_of(tmp_path, config_path="missing.yaml")
    assert str(tmp_path / "missing.yaml") in message
    assert "not found" in message


def test_config_path_replaces_the_default_file(tmp_path: Path) -> None:
    write_config(tmp_path, "http:\n  port: 3000\n")
    other = write_config(tmp_path, "http:\n  workers: 2\n", name="etc/other.yaml")
    loaded = load(tmp_path, config_path=other)
    assert loaded.config_path == other
    assert loaded.settings.http.workers == 2
    assert loaded.settings.http.port == 2424


def test_relative_config_path_is_relative_to_cwd(tmp_path: Path) -> None:
    write_config(tmp_path, "http:\n  port: 3000\n", name="custom.yaml")
    assert load(tmp_path, config_path="custom.yaml").settings.http.port == 3000


def test_config_path_that_is_a_directory(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    assert "is a directory" in error_of(tmp_path, config_path="dir")


def test_empty_yaml_file_gives_defaults(tmp_path: Path) -> None:
    write_config(tmp_path, "# nothing yet\n")
    assert load(tmp_path).settings == Settings()


def test_empty_section_is_allowed(tmp_path: Path) -> None:
    write_config(tmp_path, "http:\n  # port: 3000\nauth:\n")
    assert load(tmp_path).settings == Settings()


def test_build_settings_validates_like_yaml() -> None:
    assert build_settings({"http": {"port": 3000}}).http.port == 3000
    assert build_settings() == Settings()
    with pytest.raises(ConfigError, match=r"^http\.port: must be between 1 and 65535, got 0$"):
        build_settings({"http": {"port": 0}})


# --- ranges -------------------------------------------------------------------------------


def _bounds() -> list[Any]:
    cases = []
    for path, (low, high) in RANGES.items():
        for value, ok in ((low - 1, False), (low, True), (high, True), (high + 1, False)):
            cases.append(pytest.param(path, value, ok, id=f"{path}={value}"))
    return cases


@pytest.mark.parametrize(("path", "value", "ok"), _bounds())
def test_range_bounds_from_env(tmp_path: Path, path: str, value: int, ok: bool) -> None:
    env = {env_var_name(path): str(value)}
    if ok:
        assert value_at(load(tmp_path, env).settings, path) == value
    else:
        low, high = RANGES[path]
        message = error_of(tmp_path, env)
        assert message == (
            f"{path}: must be between {low} and {high}, got {value} (from {env_var_name(path)})"
        )


@pytest.mark.parametrize(("path", "value", "ok"), _bounds())
def test_range_bounds_from_yaml(path: str, value: int, ok: bool) -> None:
    if ok:
        assert value_at(build_settings(nested(path, value)), path) == value
    else:
        with pytest.raises(ConfigError, match=rf"^{path}: must be between"):
            build_settings(nested(path, value))


def test_range_error_names_the_yaml_file(tmp_path: Path) -> None:
    path = write_config(tmp_path, "http:\n  port: 0\n")
    assert error_of(tmp_path) == f"http.port: must be between 1 and 65535, got 0 (in {path})"


@pytest.mark.parametrize("text", ["abc", "", "1.5", "3000abc", "0x10", "1e3"])
def test_env_integers_must_be_integers(tmp_path: Path, text: str) -> None:
    assert error_of(tmp_path, {"RETSU_HTTP__PORT": text}).startswith(
        "http.port: must be an integer"
    )


def test_env_integers_allow_surrounding_whitespace(tmp_path: Path) -> None:
    assert load(tmp_path, {"RETSU_HTTP__PORT": " 3000 "}).settings.http.port == 3000


# --- booleans -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        *[(word, True) for word in ("true", "TRUE", "True", "1", "yes", "YES", "on", "On")],
        *[(word, False) for word in ("false", "FALSE", "False", "0", "no", "No", "off", "OFF")],
    ],
)
@pytest.mark.parametrize("path", BOOLEANS)
def test_env_booleans(tmp_path: Path, path: str, text: str, expected: bool) -> None:
    env = {env_var_name(path): text}
    if path == "auth.enabled" and expected:
        env["RETSU_AUTH__TOKENS"] = '[{"name": "a", "secret": "s", "scopes": ["admin"]}]'
    assert value_at(load(tmp_path, env).settings, path) is expected


@pytest.mark.parametrize("text", ["maybe", "", "2", "enabled"])
def test_env_booleans_reject_other_words(tmp_path: Path, text: str) -> None:
    message = error_of(tmp_path, {"RETSU_CACHE__IN_MEMORY__ENABLED": text})
    assert message.startswith("cache.in_memory.enabled: must be a boolean")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("true", True), ("False", False), ("yes", True), ("off", False), ("On", True)],
)
def test_yaml_booleans(tmp_path: Path, text: str, expected: bool) -> None:
    write_config(tmp_path, f"telemetry:\n  traces:\n    enabled: {text}\n")
    assert load(tmp_path).settings.telemetry.traces.enabled is expected


def test_yaml_off_stays_a_string_for_the_log_filter(tmp_path: Path) -> None:
    write_config(tmp_path, "logging:\n  filter: off\n")
    assert load(tmp_path).settings.logging.filter == "off"


# --- wrong types in YAML ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [
        ("http:\n  port: true\n", "http.port: must be an integer, got true"),
        ("http:\n  port: '3000'\n", "http.port: must be an integer, got '3000'"),
        ("http:\n  port: 3000.0\n", "http.port: must be an integer, got 3000.0"),
        ("http:\n  port: null\n", "http.port: must be an integer, got null"),
        ("http:\n  port: [1]\n", "http.port: must be an integer, got a list"),
        ("auth:\n  enabled: 1\n", "auth.enabled: must be a boolean (true or false), got 1"),
        ("auth:\n  enabled: 'maybe'\n", "auth.enabled: must be a boolean"),
        ("environment: 7\n", "environment: must be one of local, test, staging, production"),
        ("http:\n  bind_address: 127\n", "http.bind_address: must be an IP address, got 127"),
        ("http: 5\n", "http: must be a mapping, got 5"),
        ("logging:\n  filter: 3\n", "logging.filter: must be a string"),
        ("database:\n  url: 5\n", "database.url: must be a URL string, got a number"),
        ("auth:\n  tokens: abc\n", "auth.tokens: must be a list of {name, secret, scopes}"),
    ],
)
def test_wrong_yaml_types_name_the_setting(tmp_path: Path, yaml_text: str, expected: str) -> None:
    write_config(tmp_path, yaml_text)
    assert error_of(tmp_path).startswith(expected)


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    path = write_config(tmp_path, "- a\n- b\n")
    message = error_of(tmp_path)
    assert "top level must be a mapping" in message
    assert str(path) in message


def test_bad_yaml_value_is_an_error_even_when_env_overrides_it(tmp_path: Path) -> None:
    write_config(tmp_path, "http:\n  port: 0\n")
    assert error_of(tmp_path, {"RETSU_HTTP__PORT": "3000"}).startswith("http.port:")


# --- unknown keys and variables -----------------------------------------------------------


@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [
        ("http:\n  prot: 3000\n", "http.prot: unknown setting (did you mean http.port?)"),
        ("htp:\n  port: 3000\n", "htp: unknown setting (did you mean http?)"),
        (
            "cache:\n  distributed:\n    urll: redis://x\n",
            "cache.distributed.urll: unknown setting (did you mean cache.distributed.url?)",
        ),
        ("worker:\n  queue:\n    nope: {}\n", "worker.queue.nope: unknown setting"),
        ("http:\n  port:\n    value: 1\n", "http.port: must be an integer, got a mapping"),
    ],
)
def test_unknown_yaml_keys_are_errors(tmp_path: Path, yaml_text: str, expected: str) -> None:
    path = write_config(tmp_path, yaml_text)
    assert error_of(tmp_path) == f"{expected} (in {path})"


def test_unknown_env_var_is_a_warning(tmp_path: Path) -> None:
    loaded = load(
        tmp_path,
        {
            "RETSU_HTTP__PROT": "3000",
            "RETSU_NOPE": "secret-ish-value",
            "PATH": "/usr/bin",
            "retsu_http__port": "1",
        },
    )
    assert loaded.settings == Settings()
    assert loaded.warnings == (
        "unknown environment variable RETSU_HTTP__PROT ignored (did you mean RETSU_HTTP__PORT?)",
        "unknown environment variable RETSU_NOPE ignored",
    )


def test_warnings_never_carry_values(tmp_path: Path) -> None:
    loaded = load(tmp_path, {"RETSU_DATABASE__PASSWORD": SECRET})
    assert loaded.warnings
    assert all(SECRET not in warning for warning in loaded.warnings)


def test_env_section_name_is_unknown(tmp_path: Path) -> None:
    loaded = load(tmp_path, {"RETSU_HTTP": "x"})
    assert len(loaded.warnings) == 1
    assert loaded.warnings[0].startswith("unknown environment variable RETSU_HTTP ignored")


# --- YAML syntax --------------------------------------------------------------------------


def test_invalid_yaml_is_one_line_with_the_path(tmp_path: Path) -> None:
    path = write_config(tmp_path, f"database:\n  url: 'postgresql://u:{SECRET}@h\nhttp: [\n")
    message = error_of(tmp_path)
    assert message.startswith(f"{path}: invalid YAML at line ")
    assert SECRET not in message


def test_duplicate_yaml_keys_are_errors(tmp_path: Path) -> None:
    path = write_config(tmp_path, "http:\n  port: 1\n  port: 2\n")
    message = error_of(tmp_path)
    assert message.startswith(f"{path}: invalid YAML at line 3")
    assert "duplicate key 'port'" in message


# --- enums, addresses, filters ------------------------------------------------------------


@pytest.mark.parametrize("value", ["local", "test", "staging", "production"])
def test_environments(tmp_path: Path, value: str) -> None:
    assert load(tmp_path, {"RETSU_ENVIRONMENT": value}).settings.environment == value


@pytest.mark.parametrize("value", ["prod", "Production", "", "dev"])
def test_unknown_environment(tmp_path: Path, value: str) -> None:
    message = error_of(tmp_path, {"RETSU_ENVIRONMENT": value})
    assert message.startswith("environment: must be one of local, test, staging, production")


@pytest.mark.parametrize(("value", "ok"), [("pretty", True), ("json", True), ("text", False)])
def test_logging_format(tmp_path: Path, value: str, ok: bool) -> None:
    env = {"RETSU_LOGGING__FORMAT": value}
    if ok:
        assert load(tmp_path, env).settings.logging.format == value
    else:
        assert error_of(tmp_path, env).startswith("logging.format: must be one of pretty, json")


@pytest.mark.parametrize("value", ["0.0.0.0", "127.0.0.1", "::", "::1", "10.1.2.3", "fe80::1"])
@pytest.mark.parametrize("path", ["http.bind_address", "worker.management.bind_address"])
def test_ip_addresses(tmp_path: Path, path: str, value: str) -> None:
    assert value_at(load(tmp_path, {env_var_name(path): value}).settings, path) == value


@pytest.mark.parametrize("value", ["localhost", "256.0.0.1", "", "1.2.3", "0.0.0.0:80"])
@pytest.mark.parametrize("path", ["http.bind_address", "worker.management.bind_address"])
def test_bad_ip_addresses(tmp_path: Path, path: str, value: str) -> None:
    assert error_of(tmp_path, {env_var_name(path): value}).startswith(
        f"{path}: must be an IP address"
    )


@pytest.mark.parametrize(
    "value",
    [
        "warn",
        "INFO",
        "trace",
        "off",
        "Warning",
        "critical",
        "info,retsu.adapters.postgres=debug",
        "error, retsu=DEBUG , sqlalchemy.engine=off",
        "debug,uvicorn.error=warn,litestar=info",
    ],
)
def test_valid_log_filters(tmp_path: Path, value: str) -> None:
    assert load(tmp_path, {"RETSU_LOGGING__FILTER": value}).settings.logging.filter == value.strip()


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("", "must not be empty"),
        ("   ", "must not be empty"),
        ("verbose", "unknown level 'verbose'"),
        ("retsu=debug", "must start with a level"),
        ("info,retsu", "expected logger=level, got 'retsu'"),
        ("info,retsu=loud", "unknown level 'loud'"),
        ("info,", "has an empty entry"),
        ("info,=debug", "invalid logger name ''"),
        ("info,bad name=debug", "invalid logger name 'bad name'"),
    ],
)
def test_invalid_log_filters(tmp_path: Path, value: str, problem: str) -> None:
    message = error_of(tmp_path, {"RETSU_LOGGING__FILTER": value})
    assert message.startswith(f"logging.filter: {problem}")


# --- URLs ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://retsu:pw@db:5432/retsu",
        "postgres://retsu@db/retsu",
        "postgresql+asyncpg://retsu:pw@db/retsu",
        "POSTGRESQL://db/retsu",
        "postgresql:///retsu?host=/run/postgresql",
        # Several hosts, libpq style (SPEC §10): the primary is whichever takes writes.
        "postgresql://retsu:pw@db1:5432,db2:5432/retsu?target_session_attrs=read-write",
        "postgresql://retsu@/retsu?host=db1,db2&port=5432,5433&target_session_attrs=primary",
    ],
)
def test_database_urls(tmp_path: Path, url: str) -> None:
    assert load(tmp_path, {"RETSU_DATABASE__URL": url}).settings.database.url == url


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        (f"mysql://retsu:{SECRET}@db/retsu", "scheme must be one of postgresql, postgres"),
        (f"retsu:{SECRET}@db/retsu", "must be a URL such as postgresql://"),
        (f"{SECRET}", "must be a URL such as postgresql://"),
        (f"postgresql://retsu:{SECRET}@db:notaport/retsu", "has an invalid port"),
        (f"postgresql://retsu:{SECRET}@db/ret su", "must not contain whitespace"),
        (f"postgresql://retsu:{SECRET}@db1:5432,db2:x/retsu", "has an invalid port"),
        (f"postgresql://retsu:{SECRET}@db1,,db2/retsu", "has an empty host in its list"),
        (
            f"postgresql://retsu:{SECRET}@db1,db2/retsu?target_session_attrs=standby",
            "target_session_attrs must be one of any, read-write, primary",
        ),
    ],
)
def test_bad_database_urls_never_echo_the_url(tmp_path: Path, url: str, problem: str) -> None:
    message = error_of(tmp_path, {"RETSU_DATABASE__URL": url})
    assert message.startswith(f"database.url: {problem}")
    assert SECRET not in message


def test_empty_env_database_url_means_unset(tmp_path: Path) -> None:
    write_config(tmp_path, "database:\n  url: postgresql://db/retsu\n")
    assert load(tmp_path, {"RETSU_DATABASE__URL": ""}).settings.database.url is None


def test_yaml_null_database_url_means_unset(tmp_path: Path) -> None:
    write_config(tmp_path, "database:\n  url: null\n")
    assert load(tmp_path).settings.database.url is None


@pytest.mark.parametrize(
    "url", ["redis://cache:6379", "rediss://:pw@cache:6380/1", "unix:///run/redis.sock"]
)
def test_cache_urls(tmp_path: Path, url: str) -> None:
    env = {"RETSU_CACHE__DISTRIBUTED__URL": url}
    assert load(tmp_path, env).settings.cache.distributed.url == url


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://cache:6379", "scheme must be one of redis, rediss, unix, got 'http'"),
        ("redis://", "must name a host"),
        ("unix://", "must name a socket path"),
        ("", "must be a URL such as redis://"),
    ],
)
def test_bad_cache_urls(tmp_path: Path, url: str, problem: str) -> None:
    message = error_of(tmp_path, {"RETSU_CACHE__DISTRIBUTED__URL": url})
    assert message.startswith(f"cache.distributed.url: {problem}")


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("http://collector:4317", True),
        ("https://collector.example.com", True),
        ("grpc://collector:4317", False),
        ("http://", False),
    ],
)
def test_traces_endpoint(tmp_path: Path, url: str, ok: bool) -> None:
    env = {"RETSU_TELEMETRY__TRACES__ENDPOINT": url}
    if ok:
        assert load(tmp_path, env).settings.telemetry.traces.endpoint == url
    else:
        assert error_of(tmp_path, env).startswith("telemetry.traces.endpoint: ")


# --- auth tokens --------------------------------------------------------------------------


def test_tokens_from_yaml(tmp_path: Path) -> None:
    write_config(
        tmp_path,
        f"""
auth:
  enabled: true
  tokens:
    - name: ops
      secret: {SECRET}
      scopes: [admin]
    - name: consumer
      secret: another-secret
      scopes: [messages, messages]
""",
    )
    auth = load(tmp_path).settings.auth
    assert auth.enabled is True
    assert auth.tokens == (
        Token(name="ops", secret=SECRET, scopes=frozenset({"admin"})),
        Token(name="consumer", secret="another-secret", scopes=frozenset({"messages"})),
    )


def test_tokens_from_json_env_replace_yaml(tmp_path: Path) -> None:
    write_config(tmp_path, "auth:\n  tokens:\n    - {name: a, secret: s, scopes: [admin]}\n")
    env = {
        "RETSU_AUTH__ENABLED": "true",
        "RETSU_AUTH__TOKENS": (
            '[{"name": "ci", "secret": "' + SECRET + '", "scopes": ["messages", "admin"]}]'
        ),
    }
    auth = load(tmp_path, env).settings.auth
    assert auth.tokens == (
        Token(name="ci", secret=SECRET, scopes=frozenset({"messages", "admin"})),
    )


def test_token_repr_hides_the_secret() -> None:
    token = Token(name="ops", secret=SECRET, scopes=frozenset({"admin"}))
    assert SECRET not in repr(token)
    settings = build_settings(
        {
            "auth": {
                "enabled": True,
                "tokens": [{"name": "a", "secret": SECRET, "scopes": ["admin"]}],
            }
        }
    )
    assert SECRET not in repr(settings)


def test_url_passwords_do_not_reach_repr() -> None:
    settings = build_settings(
        {
            "database": {"url": f"postgresql://retsu:{SECRET}@db/retsu"},
            "cache": {"distributed": {"url": f"redis://:{SECRET}@cache:6379"}},
        }
    )
    assert SECRET not in repr(settings)
    assert "postgresql://retsu:***@db/retsu" in repr(settings)
    assert settings.database.url == f"postgresql://retsu:{SECRET}@db/retsu"


def _tokens_env(json_text: str) -> dict[str, str]:
    return {"RETSU_AUTH__TOKENS": json_text}


@pytest.mark.parametrize(
    ("json_text", "expected"),
    [
        ("{}", "auth.tokens: must be a list of {name, secret, scopes} objects, got a mapping"),
        (f'["{SECRET}"]', "auth.tokens[0]: must be a {name, secret, scopes} object, got a string"),
        (f'[{{"secret": "{SECRET}", "scopes": ["admin"]}}]', "auth.tokens[0].name: is required"),
        (
            f'[{{"name": "", "secret": "{SECRET}", "scopes": ["admin"]}}]',
            "auth.tokens[0].name: must be a non-empty string",
        ),
        ('[{"name": "a", "secret": "", "scopes": ["admin"]}]', "auth.tokens[0].secret: must be"),
        ('[{"name": "a", "secret": 5, "scopes": ["admin"]}]', "auth.tokens[0].secret: must be"),
        (
            f'[{{"name": "a", "secret": "{SECRET} x", "scopes": ["admin"]}}]',
            "auth.tokens[0].secret: must contain only visible ASCII characters",
        ),
        (
            f'[{{"name": "a", "secret": "{SECRET}", "scopes": []}}]',
            "auth.tokens[0].scopes: must be a non-empty list of scopes",
        ),
        (
            f'[{{"name": "a", "secret": "{SECRET}", "scopes": "admin"}}]',
            "auth.tokens[0].scopes: must be a non-empty list of scopes",
        ),
        (
            f'[{{"name": "a", "secret": "{SECRET}", "scopes": ["write"]}}]',
            "auth.tokens[0].scopes: unknown scope 'write'",
        ),
        (
            f'[{{"name": "a", "secret": "{SECRET}", "scopes": ["admin"], "scope": 1}}]',
            "auth.tokens[0].scope: unknown key (did you mean scopes?)",
        ),
        (
            f'[{{"name": "a", "secret": "{SECRET}", "scopes": ["admin"]}},'
            f' {{"name": "a", "secret": "other", "scopes": ["admin"]}}]',
            "auth.tokens[1].name: duplicates the name of auth.tokens[0]",
        ),
        (
            f'[{{"name": "a", "secret": "{SECRET}", "scopes": ["admin"]}},'
            f' {{"name": "b", "secret": "{SECRET}", "scopes": ["admin"]}}]',
            "auth.tokens[1].secret: duplicates the secret of auth.tokens[0]",
        ),
        (f'[{{"name": "a", "secret": "{SECRET}"', "auth.tokens: must be a JSON list"),
    ],
)
def test_bad_tokens_never_echo_secrets(tmp_path: Path, json_text: str, expected: str) -> None:
    message = error_of(tmp_path, _tokens_env(json_text))
    assert message.startswith(expected)
    assert message.endswith("(from RETSU_AUTH__TOKENS)")
    assert SECRET not in message


def test_bad_tokens_in_yaml_never_echo_secrets(tmp_path: Path) -> None:
    write_config(tmp_path, f"auth:\n  tokens:\n    - {SECRET}\n")
    message = error_of(tmp_path)
    assert message.startswith("auth.tokens[0]: must be a {name, secret, scopes} object")
    assert SECRET not in message


def test_auth_enabled_without_tokens_is_allowed_with_a_warning(tmp_path: Path) -> None:
    # The table accepts tokens = [] whatever auth.enabled says; every /v1 call then
    # gets 401, and the operator is told so once.
    loaded = load(tmp_path, {"RETSU_AUTH__ENABLED": "true"})
    assert loaded.settings.auth.enabled is True
    assert loaded.settings.auth.tokens == ()
    assert any("auth.tokens is empty" in warning for warning in loaded.warnings)


def test_a_malformed_url_is_a_one_line_error(tmp_path: Path) -> None:
    message = error_of(tmp_path, {"RETSU_DATABASE__URL": "postgresql://u:pw@[::1:5432/x"})
    assert message.startswith("database.url: is not a valid URL")
    assert "pw" not in message


def test_tokens_without_auth_enabled_warn(tmp_path: Path) -> None:
    env = _tokens_env('[{"name": "a", "secret": "s", "scopes": ["admin"]}]')
    loaded = load(tmp_path, env)
    assert loaded.settings.auth.enabled is False
    assert any("auth.enabled is false" in warning for warning in loaded.warnings)


def test_empty_tokens_env_means_no_tokens(tmp_path: Path) -> None:
    assert load(tmp_path, _tokens_env("")).settings.auth.tokens == ()
    assert load(tmp_path, _tokens_env("[]")).settings.auth.tokens == ()


# --- redaction ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://retsu:pw@db:5432/retsu", "postgresql://retsu:***@db:5432/retsu"),
        ("postgresql://retsu@db/retsu", "postgresql://retsu@db/retsu"),
        ("redis://:pw@cache:6379/0", "redis://:***@cache:6379/0"),
        ("redis://cache:6379", "redis://cache:6379"),
        ("postgresql://u:p@ss/w@rd@db/retsu", "postgresql://u:***@db/retsu"),
        ("postgresql://db/retsu?user=u&password=pw", "postgresql://db/retsu?user=u&password=***"),
        ("unix:///run/redis.sock", "unix:///run/redis.sock"),
    ],
)
def test_redacted_url(url: str, expected: str) -> None:
    assert redacted_url(url) == expected
