"""Queue rules: names and settings, each broken rule with its stable error code."""

from __future__ import annotations

import pytest

from retsu.domain.errors import InvalidInput
from retsu.domain.queue import (
    DEFAULT_MAX_DELIVERY_ATTEMPTS,
    DEFAULT_MESSAGE_TTL_SECONDS,
    DEFAULT_VISIBILITY_TIMEOUT_SECONDS,
    QueueSettings,
    QueueSettingsUpdate,
    validate_queue_name,
)

# -- names --------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "a",
        "7",
        "a" * 64,
        "orders",
        "orders.v2",
        "billing_events-high",
        "0rders9",
        "a.b",
        "a_b",
        "a-b",
        "a..b",
        "a-_.b",
        "1-" + "x" * 61 + "2",
    ],
)
def test_a_queue_name_of_lowercase_letters_digits_and_inner_punctuation_is_valid(name: str) -> None:
    assert validate_queue_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("", id="empty"),
        pytest.param("a" * 65, id="65-chars"),
        pytest.param("Orders", id="uppercase-first"),
        pytest.param("ordErs", id="uppercase-inside"),
        pytest.param("-orders", id="leading-dash"),
        pytest.param("orders-", id="trailing-dash"),
        pytest.param(".orders", id="leading-dot"),
        pytest.param("orders.", id="trailing-dot"),
        pytest.param("_orders", id="leading-underscore"),
        pytest.param("orders_", id="trailing-underscore"),
        pytest.param("-", id="only-punctuation"),
        pytest.param("my orders", id="space"),
        pytest.param(" orders", id="leading-space"),
        pytest.param("orders\n", id="trailing-newline"),
        pytest.param("orders/high", id="slash"),
        pytest.param("orders:high", id="colon"),
        pytest.param("ordérs", id="latin-accent"),
        pytest.param("キュー", id="japanese"),
        pytest.param("\uff4frders", id="fullwidth-letter"),
        pytest.param("orders٣", id="arabic-indic-digit"),
        pytest.param("orders\u200b", id="zero-width-space"),
        pytest.param("orders\x00", id="nul"),
    ],
)
def test_a_queue_name_breaking_the_format_is_invalid_queue_name(name: str) -> None:
    with pytest.raises(InvalidInput) as raised:
        validate_queue_name(name)
    assert raised.value.code == "invalid_queue_name"


@pytest.mark.parametrize("name", [None, 42, b"orders", ["orders"]])
def test_a_queue_name_that_is_not_text_is_invalid_queue_name(name: object) -> None:
    with pytest.raises(InvalidInput) as raised:
        validate_queue_name(name)  # type: ignore[arg-type]
    assert raised.value.code == "invalid_queue_name"


# -- settings -----------------------------------------------------------------

SETTING_RANGES = [
    ("visibility_timeout_seconds", 1, 21_600, "invalid_visibility_timeout"),
    ("max_delivery_attempts", 1, 100, "invalid_max_delivery_attempts"),
    ("default_message_ttl_seconds", 1, 2_592_000, "invalid_default_message_ttl"),
]


def _accepted_values() -> list[object]:
    return [
        pytest.param(field, value, id=f"{field}={value}")
        for field, low, high, _ in SETTING_RANGES
        for value in (low, low + 1, high - 1, high)
    ]


def _rejected_values() -> list[object]:
    return [
        pytest.param(field, value, code, id=f"{field}={value!r}")
        for field, low, high, code in SETTING_RANGES
        for value in (low - 1, high + 1, -1, True, False, 1.0, "30")
    ]


def test_settings_default_to_30_s_visibility_5_attempts_and_a_week_of_lifetime() -> None:
    settings = QueueSettings()
    assert settings.visibility_timeout_seconds == DEFAULT_VISIBILITY_TIMEOUT_SECONDS == 30
    assert settings.max_delivery_attempts == DEFAULT_MAX_DELIVERY_ATTEMPTS == 5
    assert settings.default_message_ttl_seconds == DEFAULT_MESSAGE_TTL_SECONDS == 604_800


@pytest.mark.parametrize(("field", "value"), _accepted_values())
def test_a_setting_inside_its_range_is_accepted(field: str, value: int) -> None:
    assert getattr(QueueSettings(**{field: value}), field) == value
    assert getattr(QueueSettings.from_optional(**{field: value}), field) == value
    assert getattr(QueueSettingsUpdate(**{field: value}), field) == value


@pytest.mark.parametrize(("field", "value", "code"), _rejected_values())
def test_a_setting_outside_its_range_or_not_an_integer_carries_its_own_code(
    field: str, value: object, code: str
) -> None:
    with pytest.raises(InvalidInput) as raised:
        QueueSettings(**{field: value})  # type: ignore[arg-type]
    assert raised.value.code == code
    with pytest.raises(InvalidInput) as raised:
        QueueSettings.from_optional(**{field: value})  # type: ignore[arg-type]
    assert raised.value.code == code
    with pytest.raises(InvalidInput) as raised:
        QueueSettingsUpdate(**{field: value})  # type: ignore[arg-type]
    assert raised.value.code == code


def test_the_error_detail_names_the_field_and_the_range() -> None:
    with pytest.raises(InvalidInput) as raised:
        QueueSettings(visibility_timeout_seconds=21_601)
    assert "visibility_timeout_seconds" in raised.value.detail
    assert "21600" in raised.value.detail


def test_absent_settings_take_their_defaults_when_a_queue_is_created() -> None:
    settings = QueueSettings.from_optional(max_delivery_attempts=9)
    assert settings == QueueSettings(max_delivery_attempts=9)


def test_an_update_without_any_setting_is_empty_queue_update() -> None:
    update = QueueSettingsUpdate()
    assert update.is_empty
    with pytest.raises(InvalidInput) as raised:
        update.require_change()
    assert raised.value.code == "empty_queue_update"


@pytest.mark.parametrize(
    "update",
    [
        QueueSettingsUpdate(visibility_timeout_seconds=1),
        QueueSettingsUpdate(max_delivery_attempts=1),
        QueueSettingsUpdate(default_message_ttl_seconds=1),
    ],
)
def test_an_update_with_any_one_setting_is_a_change(update: QueueSettingsUpdate) -> None:
    assert not update.is_empty
    assert update.require_change() is update


def test_an_update_changes_only_the_settings_it_names() -> None:
    before = QueueSettings(
        visibility_timeout_seconds=10, max_delivery_attempts=3, default_message_ttl_seconds=60
    )
    after = QueueSettingsUpdate(max_delivery_attempts=7).apply_to(before)
    assert after == QueueSettings(
        visibility_timeout_seconds=10, max_delivery_attempts=7, default_message_ttl_seconds=60
    )
    assert before.max_delivery_attempts == 3  # settings are values, never mutated
