"""Password hashing (argon2id, OWASP's minimum profile unless configured) and the password policy.

The hashing functions are CPU-bound (tens of milliseconds); async callers run them through
`asyncio.to_thread`. Passwords are never logged. Why OWASP's minimum is enough: docs/concepts/auth.md,
"Password hashing".
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from argon2 import Parameters, PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from argon2.low_level import Type
from argon2.profiles import RFC_9106_LOW_MEMORY

DEFAULT_TIME_COST = 2
"""Passes over the memory (`PASSWORD_HASH_TIME_COST`)."""
DEFAULT_MEMORY_KIB = 19 * 1024
"""Memory of one hash in KiB, 19 MiB (`PASSWORD_HASH_MEMORY_KIB`)."""
DEFAULT_PARALLELISM = 1
"""Lanes, hence threads, of one hash (`PASSWORD_HASH_PARALLELISM`)."""
MIN_MEMORY_KIB_PER_LANE = 8
"""argon2's floor: a hash needs at least 8 KiB per lane."""


def argon2id(time_cost: int, memory_kib: int, parallelism: int) -> Parameters:
    """argon2id (version 19, 16-byte salt, 32-byte hash) with `time_cost` passes over `memory_kib` KiB
    in `parallelism` lanes. Raises ValueError when `memory_kib` < MIN_MEMORY_KIB_PER_LANE * `parallelism`
    or a value is below 1."""
    if min(time_cost, memory_kib, parallelism) < 1 or memory_kib < MIN_MEMORY_KIB_PER_LANE * parallelism:
        raise ValueError(f"argon2id needs t >= 1, p >= 1 and m >= {MIN_MEMORY_KIB_PER_LANE} KiB per lane, "
                         f"got t={time_cost}, m={memory_kib}, p={parallelism}")
    return Parameters(type=Type.ID, version=19, salt_len=16, hash_len=32, time_cost=time_cost,
                      memory_cost=memory_kib, parallelism=parallelism)


DEFAULT_PARAMETERS = argon2id(DEFAULT_TIME_COST, DEFAULT_MEMORY_KIB, DEFAULT_PARALLELISM)
"""argon2id at OWASP's recommended minimum (Password Storage Cheat Sheet): m=19 MiB, t=2, p=1."""
PREVIOUS_PARAMETERS = RFC_9106_LOW_MEMORY
"""What hashes were made with before (argon2-cffi's default, RFC 9106's low-memory profile: t=3,
64 MiB, p=4): they still verify and are replaced at the user's next successful login."""

# One hasher for the process.
_HASHER = PasswordHasher.from_parameters(DEFAULT_PARAMETERS)


def use_parameters(parameters: Parameters) -> None:
    """Hash new passwords with `parameters` from now on, in this process: the configured ones
    (`cms.commands.environment.use_password_parameters`, from Config's `password_*`), or a cheap
    profile in tests so that hundreds of sign-ups do not spend minutes of CPU. Hashes made with other
    parameters still verify; `needs_rehash` answers True for them, so a login upgrades them."""
    global _HASHER
    _HASHER = PasswordHasher.from_parameters(parameters)
    dummy_hash.cache_clear()


# Used only by verify_dummy(); any fixed text works, its hash just has to exist.
_DUMMY_PASSWORD = "cms-dummy-password-for-unknown-accounts"


def hash_password(password: str) -> str:
    """Hash `password` with argon2id; returns the PHC string (`$argon2id$v=19$m=...,t=...,p=...$salt$hash`).

    A new random salt is drawn each call, so two hashes of one password differ. Raises
    UnicodeEncodeError (a ValueError) for text that is not valid Unicode (lone surrogates, which
    JSON can carry); `PasswordPolicy.violations` refuses such passwords first."""
    return _HASHER.hash(password)


def verify_password(password_hash: str, password: str) -> bool:
    """True when `password` matches `password_hash` (a string made by `hash_password`).

    Returns False, never raises, for a mismatch, for a malformed or unsupported hash, and for a
    `password` that is not valid Unicode (lone surrogates cannot be encoded, so cannot match)."""
    try:
        return _HASHER.verify(password_hash, password)
    except (VerificationError, InvalidHashError, UnicodeEncodeError):
        return False


@functools.cache
def dummy_hash() -> str:
    """The PHC hash `verify_dummy` verifies against: made once per hasher (lazily, with the current
    parameters, so its verification costs what a real one does). Each `verify_dummy` calls it once,
    so `dummy_hash.cache_info()` (hits + misses) counts the dummy verifications of this process
    (decisions.md, Identity and tokens: a failed login is the same for an unknown email)."""
    return _HASHER.hash(_DUMMY_PASSWORD)


def verify_dummy(password: str) -> None:
    """Spend the time of one real `verify_password` against a fixed dummy hash, and discard the result.

    Called for an unknown email so a login takes as long as for a known one (no timing oracle).
    The first call also computes the dummy hash once per process."""
    verify_password(dummy_hash(), password)


def needs_rehash(password_hash: str) -> bool:
    """True when `password_hash` was made with other parameters than the current hasher's.

    A malformed hash also answers True (it cannot be kept); callers rehash only after a successful verify."""
    try:
        return _HASHER.check_needs_rehash(password_hash)
    except ValueError:  # InvalidHashError is a ValueError; any unparsable hash lands here
        return True


@dataclass(frozen=True)
class PasswordPolicy:
    """Rules a new password must satisfy; lengths count characters (code points).

    `max_length` bounds the hashing cost of a single request. Raises ValueError at construction
    when `min_length` is below 1 or above `max_length`."""

    min_length: int = 8
    require_upper: bool = False
    require_number: bool = False
    require_special: bool = False
    max_length: int = 256

    def __post_init__(self) -> None:
        if not 1 <= self.min_length <= self.max_length:
            raise ValueError(
                f"PasswordPolicy needs 1 <= min_length <= max_length, got {self.min_length}, {self.max_length}"
            )

    def violations(self, password: str) -> list[str]:
        """Human-readable messages for every rule `password` breaks, in rule order; empty when it is acceptable.

        Messages: "must be at least N characters", "must be at most N characters",
        "must contain an uppercase letter", "must contain a number", "must contain a special character"
        (a special character is anything that is neither a letter nor a digit, space included),
        and last "must be valid Unicode text" for a password with lone surrogates (it cannot be hashed)."""
        messages: list[str] = []
        if len(password) < self.min_length:
            messages.append(f"must be at least {self.min_length} characters")
        if len(password) > self.max_length:
            messages.append(f"must be at most {self.max_length} characters")
        if self.require_upper and not any(char.isupper() for char in password):
            messages.append("must contain an uppercase letter")
        if self.require_number and not any(char.isdigit() for char in password):
            messages.append("must contain a number")
        if self.require_special and all(char.isalnum() for char in password):
            messages.append("must contain a special character")
        if not is_unicode_text(password):
            messages.append("must be valid Unicode text")
        return messages


def is_unicode_text(text: str) -> bool:
    """False when `text` holds lone surrogates (JSON's "\\ud800" decodes to one), which UTF-8 cannot
    encode: such text can be neither hashed nor stored in MongoDB."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
