"""SettingsService.set refuses unknown keys, wrong types and out-of-range integers."""

import pytest

from cms.errors import ValidationFailed


@pytest.mark.parametrize("key, value", [
    ("no_such_setting", 1),
    ("password_min_length", "8"),
    ("password_min_length", True),
    ("password_min_length", 0),
    ("token_expiry_hours", 0),
    ("refresh_token_expiry_days", -1),
    ("rate_limit_enabled", 1),
    ("refresh_reuse_interval_s", -1),
    ("refresh_reuse_interval_s", 601),
    ("refresh_reuse_interval_s", 1.5),
], ids=["unknown", "string-for-int", "bool-for-int", "min-length-0", "expiry-0", "refresh-negative", "int-for-bool",
        "reuse-interval-negative", "reuse-interval-over-600", "reuse-interval-float"])
async def test_bad_settings_refused(services, key, value):
    with pytest.raises(ValidationFailed):
        await services.settings.set(key, value)
    assert (await services.settings.values())["password_min_length"] == 8


async def test_setting_applies_at_once_in_this_process(services):
    await services.settings.set("password_min_length", 12)
    assert (await services.settings.auth()).password_policy.min_length == 12


async def test_refresh_reuse_interval_defaults_to_off_and_takes_0_to_600(services):
    assert (await services.settings.auth()).refresh_reuse_interval_s == 0
    for value in (600, 0, 10):
        await services.settings.set("refresh_reuse_interval_s", value)
        assert (await services.settings.auth()).refresh_reuse_interval_s == value
