"""The pure parts of OAuth2 login (cms.security.oauth): provider settings, masking, signed state."""

from __future__ import annotations

import json

import pytest

from cms.security.oauth import (
    MASK,
    LoginState,
    ProviderConfigError,
    dump_providers,
    masked,
    parse_providers,
    read_state,
    sign_state,
    with_kept_secrets,
)

KEY = b"k" * 32
STATE = LoginState(provider="local", audience="admin", code_challenge="c" * 43, nonce="n", expires_at=1_000)


def test_a_signed_state_reads_back_until_it_expires():
    text = sign_state(STATE, KEY)
    assert read_state(text, KEY, 999) == STATE
    assert read_state(text, KEY, 1_000) is None  # expired at expires_at


@pytest.mark.parametrize("tamper", [
    lambda t: t + "x", lambda t: "x" + t, lambda t: t.replace(".", ""), lambda t: t + ".x",
    lambda t: t.split(".")[0] + "." + "A" * 43, lambda t: "", lambda t: "a" * 3000,
])
def test_a_tampered_state_is_none(tamper):
    assert read_state(tamper(sign_state(STATE, KEY)), KEY, 0) is None


def test_a_state_signed_with_another_key_is_none():
    assert read_state(sign_state(STATE, b"other" * 8), KEY, 0) is None


def test_presets_fill_in_and_explicit_values_win():
    github, custom = parse_providers(json.dumps([
        {"name": "github", "client_id": "a", "client_secret": "s"},
        {"name": "corp", "client_id": "b", "discovery_url": "https://id.corp/.well-known/openid-configuration",
         "scopes": ["openid", "email"]},
    ]))
    assert github.token_url == "https://github.com/login/oauth/access_token" and not github.openid
    assert github.emails_url.endswith("/user/emails")
    assert custom.openid and custom.scopes == ("openid", "email") and custom.client_secret == ""
    override = parse_providers(json.dumps([{"name": "google", "client_id": "g", "scopes": ["openid"]}]))[0]
    assert override.scopes == ("openid",) and override.discovery_url.startswith("https://accounts.google.com/")


@pytest.mark.parametrize("raw", [
    "[1]", '[{"name": "a", "client_id": ""}]', '[{"name": "a", "client_id": 3, "discovery_url": "https://x"}]',
    json.dumps([{"name": "github", "client_id": "a"}] * 2),
    json.dumps([{"name": f"p{i}", "client_id": "a", "discovery_url": "https://x"} for i in range(21)]),
    json.dumps([{"name": "a", "client_id": "x", "auth_url": "https://x/a", "token_url": "https://x/t"}]),
    json.dumps([{"name": "a", "client_id": "x", "discovery_url": "https://x", "scopes": "openid"}]),
    "x" * 70_000, "[" * 1000 + "]" * 1000,
])
def test_invalid_provider_lists_are_refused(raw):
    with pytest.raises(ProviderConfigError):
        parse_providers(raw)


def test_secrets_are_masked_and_a_mask_written_back_keeps_the_secret():
    stored = dump_providers(parse_providers(json.dumps([
        {"name": "github", "client_id": "a", "client_secret": "s3cret"},
        {"name": "gitlab", "client_id": "b"},
    ])))
    shown = masked(stored)
    assert "s3cret" not in shown
    assert [p["client_secret"] if "client_secret" in p else "" for p in json.loads(shown)] == [MASK, ""]
    kept = with_kept_secrets(parse_providers(shown), stored)
    assert [p.client_secret for p in kept] == ["s3cret", ""]
    scopes_changed = json.loads(shown)
    scopes_changed[0]["scopes"] = ["read:user"]
    assert with_kept_secrets(parse_providers(json.dumps(scopes_changed)), stored)[0].client_secret == "s3cret"
    assert masked("not json") == "[]"


@pytest.mark.parametrize("change", [
    lambda p: {**p, "name": "google"},  # a mask under another name: nothing stored to keep
    lambda p: {**p, "token_url": "https://attacker.example/token"},
    lambda p: {**p, "client_id": "other"},
    lambda p: {k: v for k, v in p.items() if k != "userinfo_url"} | {"userinfo_url": "https://x.example/u"},
])
def test_a_mask_is_refused_once_the_secret_would_go_elsewhere(change):
    stored = dump_providers(parse_providers(json.dumps([{"name": "github", "client_id": "a",
                                                         "client_secret": "s3cret"}])))
    shown = json.loads(masked(stored))
    with pytest.raises(ProviderConfigError, match="client_secret"):
        with_kept_secrets(parse_providers(json.dumps([change(shown[0])])), stored)
    # a new secret with the change is fine
    changed = {**change(shown[0]), "client_secret": "new"}
    assert with_kept_secrets(parse_providers(json.dumps([changed])), stored)[0].client_secret == "new"
