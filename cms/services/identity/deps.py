"""What the identity flows share (`IdentityDeps`): the user systems and the platform services every
flow of cms/services/identity/ may use (spec: Admin authentication, Auth collection endpoints;
decisions.md: Identity and tokens).

Each flow (`Credentials`, `Registration`, `Login`, `TwoFactor`, `OAuthLogin`, `OtpService`,
`Verification`, `PasswordReset`, `EmailChange`, `UserSessions`) takes one `IdentityDeps` first and
then only the collaborators of its own (another flow, its repository), so the flows are wired in one
place (`cms.builders.build_identity`) and a new flow does not re-list the platform.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from cms.clock import Clock, utcnow

if TYPE_CHECKING:  # the flows import this module; these modules import flows' helpers
    from cms.jobs import JobQueue
    from cms.services.delivery.events import EventBus
    from cms.services.delivery.mail import Mailer
    from cms.services.identity.one_time_tokens import OneTimeTokens
    from cms.services.identity.session_tokens import SessionService
    from cms.services.identity.systems import UserSystems
    from cms.services.operations.settings import SettingsService


@dataclass(frozen=True)
class IdentityDeps:
    """The user systems (`systems`), sessions and their tokens (`sessions`), the settings (password
    policy, token lifetimes), the event bus (audit and session events), one-time tokens (links),
    mail and the job queue (queued emails), and the clock."""

    systems: UserSystems
    sessions: SessionService
    settings: SettingsService
    events: EventBus
    one_time_tokens: OneTimeTokens
    mailer: Mailer
    jobs: JobQueue
    clock: Clock = utcnow
