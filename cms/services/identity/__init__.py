"""One identity core for both user systems (issue 13): the admin table and every auth collection.

`systems.py` holds the `UserSystem` seam (what differs: storage, audience, principal, creation) and
its two implementations; every flow is written once, in a module of its own, and takes a system:
`credentials.py` (normalisation, policy, hashing, password change), `registration.py`,
`login.py` (password; OTP in `otp.py`, the second factor in `mfa.py`, OAuth2 / OIDC in
`oauth.py`), `verification.py`, `password_reset.py`,
`email_change.py` and `sessions.py`. `Identity` bundles them for the API and the workers.
"""

from __future__ import annotations

from dataclasses import dataclass

from cms.services.identity.credentials import Credentials
from cms.services.identity.email_change import EmailChange
from cms.services.identity.login import Login
from cms.services.identity.mfa import TwoFactor
from cms.services.identity.oauth import OAuthLogin
from cms.services.identity.otp import OtpService
from cms.services.identity.password_reset import PasswordReset
from cms.services.identity.registration import Registration
from cms.services.identity.sessions import UserSessions
from cms.services.identity.systems import UserSystems
from cms.services.identity.verification import Verification


@dataclass(frozen=True)
class Identity:
    """The user systems and every identity flow of one process."""

    systems: UserSystems
    credentials: Credentials
    registration: Registration
    login: Login
    two_factor: TwoFactor
    oauth: OAuthLogin
    otp: OtpService
    verification: Verification
    password_reset: PasswordReset
    email_change: EmailChange
    sessions: UserSessions
