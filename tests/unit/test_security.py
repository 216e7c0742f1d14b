"""Scenario tables for cms.security: passwords, JWTs, one-time codes and webhook signatures."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import jwt
import pytest
from argon2 import PasswordHasher, extract_parameters

from cms.errors import Unauthorized
from cms.security import codes, passwords, signing
from cms.security.passwords import (
    PasswordPolicy,
    hash_password,
    needs_rehash,
    verify_dummy,
    verify_password,
)
from cms.security.tokens import ACCESS, REFRESH, TokenClaims, TokenCodec

SECRET = "test-secret-key-that-is-long-enough-for-hs512-0123456789abcdef-0123456789abcdef"
OTHER_SECRET = "another-secret-key-that-is-long-enough-for-hs512-0123456789abcdef-0123456789ab"
AUDIENCE = "collection:3f2b8c1e-4d5a-4b6c-9e7f-0a1b2c3d4e5f"
START = datetime(2030, 1, 1, 12, 0, 0, 500_000, tzinfo=UTC)


class FakeClock:
    """An injected clock: returns `now`, which a test moves with `advance(seconds)`."""

    def __init__(self, now: datetime = START) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def payload_for(claims: TokenClaims) -> dict[str, object]:
    return {
        "sub": claims.sub,
        "sid": claims.sid,
        "jti": claims.jti,
        "typ": claims.typ,
        "aud": claims.aud,
        "iat": int(claims.iat.timestamp()),
        "exp": int(claims.exp.timestamp()),
    }


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def codec(clock: FakeClock) -> TokenCodec:
    return TokenCodec(SECRET, clock=clock)


# --- passwords ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stored_hash() -> str:
    return hash_password("correct horse battery staple")


@pytest.mark.parametrize(
    "password, expected",
    [
        ("correct horse battery staple", True),
        ("correct horse battery stapl", False),
        ("Correct horse battery staple", False),
        ("", False),
    ],
    ids=["match", "one-char-short", "case-differs", "empty"],
)
def test_verify_password(stored_hash: str, password: str, expected: bool) -> None:
    assert verify_password(stored_hash, password) is expected


def test_hash_is_argon2id_and_salted(stored_hash: str) -> None:
    assert stored_hash.startswith("$argon2id$")
    assert hash_password("correct horse battery staple") != stored_hash
    assert needs_rehash(stored_hash) is False


@pytest.mark.parametrize(
    "password_hash",
    [
        "",
        "not-a-hash",
        "$argon2id$v=19$m=65536,t=3,p=4$AAAA$BBBB",
        "$2b$12$abcdefghijklmnopqrstuuABCDEFGHIJKLMNOPQRSTUVWXYZ01234",
    ],
    ids=["empty", "garbage", "truncated-argon2", "bcrypt"],
)
def test_malformed_hash_verifies_false(password_hash: str) -> None:
    assert verify_password(password_hash, "anything") is False
    assert needs_rehash(password_hash) is True


def test_a_server_hashes_with_owasps_minimum() -> None:
    """The suite hashes cheaply (tests/conftest.py); a process that does not ask for that hashes
    with argon2id at OWASP's recommended minimum: 19 MiB, two passes, one lane."""
    script = "from cms.security.passwords import hash_password; print(hash_password('x'))"
    printed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                             timeout=60).stdout
    assert printed.startswith("$argon2id$v=19$m=19456,t=2,p=1$")
    defaults = passwords.DEFAULT_PARAMETERS
    assert (defaults.memory_cost, defaults.time_cost, defaults.parallelism) == (19 * 1024, 2, 1)
    assert extract_parameters(printed.strip()) == defaults


def test_a_configured_process_hashes_with_its_parameters() -> None:
    """`cms` commands read PASSWORD_HASH_* once (Config.from_env) and hash with them."""
    script = ("from cms.commands.environment import use_password_parameters; from cms.config import Config;"
              "from cms.security.passwords import hash_password;"
              "use_password_parameters(Config.from_env({'PASSWORD_HASH_TIME_COST': '3', "
              "'PASSWORD_HASH_MEMORY_KIB': '12288', 'PASSWORD_HASH_PARALLELISM': '2'}, data_dir=__import__('pathlib')"
              ".Path(__import__('tempfile').mkdtemp())));"
              "print(hash_password('x'))")
    printed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                             timeout=60).stdout
    assert printed.startswith("$argon2id$v=19$m=12288,t=3,p=2$")


@pytest.mark.parametrize("time_cost, memory_kib, parallelism", [(0, 19456, 1), (2, 7, 1), (2, 15, 2), (2, 19456, 0)],
                         ids=["no-pass", "under-8-kib", "under-8-kib-per-lane", "no-lane"])
def test_argon2id_refuses_what_argon2_cannot_run(time_cost: int, memory_kib: int, parallelism: int) -> None:
    with pytest.raises(ValueError, match="argon2id needs"):
        passwords.argon2id(time_cost, memory_kib, parallelism)


def test_a_hash_of_other_parameters_still_verifies_and_asks_for_a_rehash() -> None:
    strong = PasswordHasher.from_parameters(passwords.DEFAULT_PARAMETERS).hash("correct horse")
    assert verify_password(strong, "correct horse") is True
    assert verify_password(strong, "correct horsf") is False
    assert needs_rehash(strong) is True  # the suite's cheap parameters are the current ones


def test_verify_dummy_costs_a_real_verify(stored_hash: str) -> None:
    # Same argon2 parameters as a real hash means the same verify time.
    dummy = passwords.dummy_hash()
    assert dummy.split("$")[:4] == stored_hash.split("$")[:4]
    verify_dummy("correct horse battery staple")


@pytest.mark.parametrize(
    "policy, password, expected",
    [
        (PasswordPolicy(), "abcdefgh", []),
        (PasswordPolicy(), "abcdefg", ["must be at least 8 characters"]),
        (PasswordPolicy(min_length=12), "abcdefghijk", ["must be at least 12 characters"]),
        (PasswordPolicy(max_length=10), "abcdefghijk", ["must be at most 10 characters"]),
        (PasswordPolicy(require_upper=True), "abcdefgh", ["must contain an uppercase letter"]),
        (PasswordPolicy(require_upper=True), "abcdEfgh", []),
        (PasswordPolicy(require_number=True), "abcdefgh", ["must contain a number"]),
        (PasswordPolicy(require_number=True), "abcdefg1", []),
        (PasswordPolicy(require_special=True), "abcdefg1", ["must contain a special character"]),
        (PasswordPolicy(require_special=True), "abcdefg!", []),
        (
            PasswordPolicy(require_upper=True, require_number=True, require_special=True),
            "short",
            [
                "must be at least 8 characters",
                "must contain an uppercase letter",
                "must contain a number",
                "must contain a special character",
            ],
        ),
        (
            PasswordPolicy(require_upper=True, require_number=True, require_special=True),
            "Str0ng pass!",
            [],
        ),
    ],
    ids=[
        "default-ok",
        "too-short",
        "custom-min",
        "too-long",
        "no-upper",
        "upper-ok",
        "no-number",
        "number-ok",
        "no-special",
        "special-ok",
        "all-rules-broken",
        "all-rules-ok",
    ],
)
def test_password_policy(policy: PasswordPolicy, password: str, expected: list[str]) -> None:
    assert policy.violations(password) == expected


@pytest.mark.parametrize("min_length, max_length", [(0, 256), (20, 10)], ids=["zero-min", "min-above-max"])
def test_password_policy_rejects_bad_bounds(min_length: int, max_length: int) -> None:
    with pytest.raises(ValueError):
        PasswordPolicy(min_length=min_length, max_length=max_length)


# --- tokens ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "typ, aud", [(ACCESS, "admin"), (REFRESH, AUDIENCE)], ids=["access-admin", "refresh-collection"]
)
def test_token_round_trip(codec: TokenCodec, typ: str, aud: str) -> None:
    token, issued = codec.issue(sub="user-1", sid="session-1", typ=typ, aud=aud, lifetime_s=900)

    decoded = codec.decode(token, typ=typ, audience=aud)

    assert decoded == issued
    assert decoded.iat == START.replace(microsecond=0)
    assert decoded.exp == decoded.iat + timedelta(seconds=900)
    assert decoded.iat.tzinfo is not None
    assert (decoded.sub, decoded.sid, decoded.typ, decoded.aud) == ("user-1", "session-1", typ, aud)
    assert jwt.get_unverified_header(token)["alg"] == "HS256"


def test_token_jti_defaults_to_new_id_and_can_be_given(codec: TokenCodec) -> None:
    _, first = codec.issue(sub="u", sid="s", typ=ACCESS, aud="admin", lifetime_s=60)
    _, second = codec.issue(sub="u", sid="s", typ=ACCESS, aud="admin", lifetime_s=60)
    _, given = codec.issue(sub="u", sid="s", typ=ACCESS, aud="admin", lifetime_s=60, jti="jti-1")

    assert len(first.jti) == 36 and first.jti != second.jti
    assert given.jti == "jti-1"


@pytest.mark.parametrize(
    "advance_s, expired",
    [(0, False), (899, False), (900, True), (3600, True)],
    ids=["fresh", "last-second", "at-exp", "an-hour-later"],
)
def test_token_expiry_follows_injected_clock(
    codec: TokenCodec, clock: FakeClock, advance_s: int, expired: bool
) -> None:
    token, _ = codec.issue(sub="u", sid="s", typ=ACCESS, aud="admin", lifetime_s=900)
    # iat is truncated to whole seconds, so exp is START minus its half second plus 900 s.
    clock.now = START.replace(microsecond=0)
    clock.advance(advance_s)

    if expired:
        with pytest.raises(Unauthorized, match="Token has expired"):
            codec.decode(token, typ=ACCESS, audience="admin")
    else:
        assert codec.decode(token, typ=ACCESS, audience="admin").sub == "u"


def test_token_issued_by_past_clock_is_expired_now() -> None:
    past = TokenCodec(SECRET, clock=FakeClock(datetime(2020, 1, 1, tzinfo=UTC)))
    token, _ = past.issue(sub="u", sid="s", typ=ACCESS, aud="admin", lifetime_s=60)

    with pytest.raises(Unauthorized, match="Token has expired"):
        TokenCodec(SECRET).decode(token, typ=ACCESS, audience="admin")


def _hand_made_tokens(codec: TokenCodec) -> dict[str, str]:
    """Tokens that must all be refused when decoded as an admin access token."""
    valid, claims = codec.issue(sub="u", sid="s", typ=ACCESS, aud="admin", lifetime_s=900)
    payload = payload_for(claims)
    header_b64, payload_b64, signature_b64 = valid.split(".")
    missing_sid = {k: v for k, v in payload.items() if k != "sid"}
    none_header_b64 = b64url(json.dumps({"alg": "none", "typ": "JWT"}).encode())
    forged_payload_b64 = b64url(json.dumps({**payload, "sub": "admin"}).encode())
    return {
        "refresh-as-access": codec.issue(sub="u", sid="s", typ=REFRESH, aud="admin", lifetime_s=900)[0],
        "wrong-audience": codec.issue(sub="u", sid="s", typ=ACCESS, aud=AUDIENCE, lifetime_s=900)[0],
        "other-key": jwt.encode(payload, OTHER_SECRET, algorithm="HS256"),
        "alg-none": f"{none_header_b64}.{payload_b64}.",
        "hs512-same-key": jwt.encode(payload, SECRET, algorithm="HS512"),
        "tampered-payload": f"{header_b64}.{forged_payload_b64}.{signature_b64}",
        "missing-sid": jwt.encode(missing_sid, SECRET, algorithm="HS256"),
        "string-exp": jwt.encode({**payload, "exp": "tomorrow"}, SECRET, algorithm="HS256"),
        "garbage": "not.a.jwt",
        "empty": "",
        "two-segments": f"{header_b64}.{payload_b64}",
    }


# (case in _hand_made_tokens, expected words of the Unauthorized detail); the case is the test id.
REFUSED_TOKENS = [
    ("refresh-as-access", "Wrong token type"),
    ("wrong-audience", "not valid for this audience"),
    ("other-key", "signature is invalid"),
    ("alg-none", "algorithm is not allowed"),
    ("hs512-same-key", "algorithm is not allowed"),
    ("tampered-payload", "signature is invalid"),
    ("missing-sid", "missing the 'sid' claim"),
    ("string-exp", "claim 'exp' is invalid"),
    ("garbage", "malformed"),
    ("empty", "malformed"),
    ("two-segments", "malformed"),
]


@pytest.mark.parametrize("case, detail", REFUSED_TOKENS, ids=[case for case, _ in REFUSED_TOKENS])
def test_token_refused(codec: TokenCodec, case: str, detail: str) -> None:
    token = _hand_made_tokens(codec)[case]

    with pytest.raises(Unauthorized, match=re.escape(detail)) as excinfo:
        codec.decode(token, typ=ACCESS, audience="admin")

    assert excinfo.value.status == 401 and excinfo.value.code == "unauthorized"


def test_access_token_refused_as_refresh(codec: TokenCodec) -> None:
    token, _ = codec.issue(sub="u", sid="s", typ=ACCESS, aud="admin", lifetime_s=900)

    with pytest.raises(Unauthorized, match="Wrong token type"):
        codec.decode(token, typ=REFRESH, audience="admin")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"typ": "id", "lifetime_s": 60},
        {"typ": ACCESS, "lifetime_s": 0},
        {"typ": ACCESS, "lifetime_s": -5},
    ],
    ids=["unknown-typ", "zero-lifetime", "negative-lifetime"],
)
def test_issue_rejects_bad_arguments(codec: TokenCodec, kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        codec.issue(sub="u", sid="s", aud="admin", **kwargs)  # type: ignore[arg-type]


def test_codec_rejects_empty_secret() -> None:
    with pytest.raises(ValueError):
        TokenCodec("")


# --- codes -------------------------------------------------------------------------------------


def test_otp_codes_are_six_digit_strings() -> None:
    samples = [codes.new_otp_code() for _ in range(500)]

    assert all(isinstance(code, str) and re.fullmatch(r"\d{6}", code) for code in samples)
    assert len(set(samples)) > 400


def test_otp_code_keeps_leading_zeros(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(secrets, "randbelow", lambda _: 42)

    assert codes.new_otp_code() == "000042"


@pytest.mark.parametrize("nbytes, min_len", [(16, 21), (32, 43)], ids=["16-bytes", "32-bytes"])
def test_new_token_is_url_safe(nbytes: int, min_len: int) -> None:
    token = codes.new_token(nbytes)

    assert re.fullmatch(r"[A-Za-z0-9_-]+", token) and len(token) >= min_len
    assert codes.new_token(nbytes) != token


@pytest.mark.parametrize(
    "token, expected",
    [
        ("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
        ("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
    ],
    ids=["empty", "abc"],
)
def test_hash_token_is_sha256_hex(token: str, expected: str) -> None:
    assert codes.hash_token(token) == expected


def test_new_api_key() -> None:
    key = codes.new_api_key()

    assert key.startswith("cms_") and re.fullmatch(r"cms_[A-Za-z0-9_-]{43}", key)
    assert codes.new_api_key() != key


@pytest.mark.parametrize(
    "a, b, expected",
    [("secret", "secret", True), ("secret", "secreT", False), ("secret", "secret2", False), ("é", "é", True)],
    ids=["equal", "differs", "length-differs", "non-ascii"],
)
def test_constant_time_equals(a: str, b: str, expected: bool) -> None:
    assert codes.constant_time_equals(a, b) is expected


# --- webhook signatures ------------------------------------------------------------------------

WEBHOOK_SECRET = "whsec_test"
BODY = b'{"event":"record.created","record":{"id":"1"}}'


def test_sign_known_vector() -> None:
    expected = "sha256=" + hmac.new(WEBHOOK_SECRET.encode(), BODY, hashlib.sha256).hexdigest()

    assert signing.sign(WEBHOOK_SECRET, BODY) == expected
    assert signing.SIGNATURE_HEADER == "X-Webhook-Signature"


@pytest.mark.parametrize(
    "secret, body, header_value, expected",
    [
        (WEBHOOK_SECRET, BODY, signing.sign(WEBHOOK_SECRET, BODY), True),
        (WEBHOOK_SECRET, BODY + b" ", signing.sign(WEBHOOK_SECRET, BODY), False),
        ("other-secret", BODY, signing.sign(WEBHOOK_SECRET, BODY), False),
        (WEBHOOK_SECRET, BODY, signing.sign(WEBHOOK_SECRET, BODY).removeprefix("sha256="), False),
        (WEBHOOK_SECRET, BODY, "sha1=" + hmac.new(WEBHOOK_SECRET.encode(), BODY, "sha1").hexdigest(), False),
        (WEBHOOK_SECRET, BODY, "", False),
        (WEBHOOK_SECRET, BODY, "sha256=é", False),
    ],
    ids=["valid", "tampered-body", "wrong-secret", "missing-prefix", "sha1", "empty", "non-ascii"],
)
def test_verify_signature(secret: str, body: bytes, header_value: str, expected: bool) -> None:
    assert signing.verify(secret, body, header_value) is expected
