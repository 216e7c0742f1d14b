"""Config.from_env: every bad value stops start-up with a message naming the variable."""

from pathlib import Path

import pytest

from cms.config import Config, ConfigError
from cms.security import passwords

PRODUCTION = {"MONGODB_URL": "mongodb://db:27017", "REDIS_URL": "redis://cache:6379/0", "SECRET_KEY": "k" * 40}


@pytest.mark.parametrize("env, variable", [
    ({"MONGODB_URL": "postgres://x"}, "MONGODB_URL"),
    ({"REDIS_URL": "http://x"}, "REDIS_URL"),
    ({"MONGODB_URL": "mongodb://db", "REDIS_URL": "redis://cache"}, "SECRET_KEY"),
    ({**PRODUCTION, "SECRET_KEY": "short"}, "SECRET_KEY"),
    ({**PRODUCTION, "SMTP_PORT": "abc"}, "SMTP_PORT"),
    ({**PRODUCTION, "SMTP_PORT": "70000"}, "SMTP_PORT"),
    ({**PRODUCTION, "SMTP_STARTTLS": "maybe"}, "SMTP_STARTTLS"),
    ({**PRODUCTION, "LOG_LEVEL": "LOUD"}, "LOG_LEVEL"),
    ({**PRODUCTION, "ADMIN_EMAIL": "a@b.c"}, "ADMIN_EMAIL"),
    ({**PRODUCTION, "PUBLIC_URL": "ftp://x"}, "PUBLIC_URL"),
    ({**PRODUCTION, "MONGODB_DB": "bad name!"}, "MONGODB_DB"),
    ({**PRODUCTION, "CACHE_REDIS_URL": "memcached://x"}, "CACHE_REDIS_URL"),
    ({**PRODUCTION, "LIST_SCAN_PER_CLIENT": "0"}, "LIST_SCAN_PER_CLIENT"),
    ({**PRODUCTION, "PASSWORD_HASH_TIME_COST": "0"}, "PASSWORD_HASH_TIME_COST"),
    ({**PRODUCTION, "PASSWORD_HASH_TIME_COST": "two"}, "PASSWORD_HASH_TIME_COST"),
    ({**PRODUCTION, "PASSWORD_HASH_MEMORY_KIB": "512"}, "PASSWORD_HASH_MEMORY_KIB"),
    ({**PRODUCTION, "PASSWORD_HASH_MEMORY_KIB": "19MiB"}, "PASSWORD_HASH_MEMORY_KIB"),
    ({**PRODUCTION, "PASSWORD_HASH_PARALLELISM": "65"}, "PASSWORD_HASH_PARALLELISM"),
], ids=["mongodb-scheme", "redis-scheme", "secret-missing", "secret-short", "smtp-port-text", "smtp-port-range",
        "starttls", "log-level", "admin-half", "public-url", "db-name", "cache-redis-scheme", "scan-share-range",
        "hash-passes", "hash-passes-text", "hash-memory-small", "hash-memory-unit", "hash-lanes"])
def test_bad_values_name_the_variable(env, variable, tmp_path: Path):
    with pytest.raises(ConfigError, match=variable):
        Config.from_env(env, data_dir=tmp_path)


def test_production_values(tmp_path: Path):
    config = Config.from_env({**PRODUCTION, "SMTP_PORT": "2525", "SMTP_STARTTLS": "false", "LOG_LEVEL": "debug",
                              "CORS_ORIGINS": "https://a.example, https://b.example"}, data_dir=tmp_path)
    assert not config.embedded
    assert config.smtp_port == 2525 and config.smtp_starttls is False and config.log_level == "DEBUG"
    assert config.cors_origins == ("https://a.example", "https://b.example")
    assert config.base_url == "http://127.0.0.1:8090"
    assert "k" * 40 not in repr(config)
    assert config.cache_redis_url is None  # the cache shares the queue's Redis unless told otherwise
    assert (config.list_scan_slots, config.list_scan_per_client) == (4, 8)
    scans = Config.from_env({**PRODUCTION, "LIST_SCAN_SLOTS": "16", "LIST_SCAN_PER_CLIENT": "20"}, data_dir=tmp_path)
    assert (scans.list_scan_slots, scans.list_scan_per_client) == (16, 20)
    assert config.password_parameters == passwords.DEFAULT_PARAMETERS  # OWASP's minimum: 19 MiB, t=2, p=1
    hashing = Config.from_env({**PRODUCTION, "PASSWORD_HASH_TIME_COST": "3", "PASSWORD_HASH_MEMORY_KIB": "65536",
                               "PASSWORD_HASH_PARALLELISM": "4"}, data_dir=tmp_path)
    assert hashing.password_parameters == passwords.PREVIOUS_PARAMETERS
    split = Config.from_env({**PRODUCTION, "CACHE_REDIS_URL": "redis://lru:6379/0"}, data_dir=tmp_path)
    assert split.cache_redis_url == "redis://lru:6379/0" and split.redis_url == "redis://cache:6379/0"


def test_embedded_secret_key_generated_once_and_kept(tmp_path: Path):
    first = Config.from_env({}, data_dir=tmp_path)
    second = Config.from_env({}, data_dir=tmp_path)
    assert first.embedded
    assert first.secret_key == second.secret_key and len(first.secret_key) >= 32
    assert (tmp_path / "secret_key").stat().st_mode & 0o777 == 0o600


def test_empty_values_count_as_unset(tmp_path: Path):
    config = Config.from_env({"MONGODB_URL": "", "SMTP_HOST": ""}, data_dir=tmp_path)
    assert config.mongodb_url is None and config.smtp_host is None
