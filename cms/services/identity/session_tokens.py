"""Sessions and JWTs for every user system (decisions.md, Identity and tokens).

Each login creates a session; access and refresh tokens carry its id (`sid`) and are valid only
while the session is active, so a revocation holds at once on every replica. Refresh rotates:
the spent refresh token's jti is replaced atomically, and presenting a spent one again revokes
the whole session (reuse detection). An operator may allow a grace (`refresh_reuse_interval_s`):
the token spent by the last rotation, presented again within that many seconds, gets a pair for the
session's current refresh jti instead (two tabs refreshing at once).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import timedelta

from cms.clock import Clock, new_id, utcnow
from cms.errors import Unauthorized
from cms.models import Principal, Session, TokenPair
from cms.security.tokens import ACCESS, REFRESH, TokenClaims, TokenCodec
from cms.services.caching.definition_cache import DefinitionCache
from cms.services.delivery.events import REFRESH_TOKEN_REUSE, EventBus, SessionEvent
from cms.store.sessions import SessionRepository

log = logging.getLogger("cms.sessions")

TOUCH_INTERVAL = timedelta(seconds=60)

class SessionService:
    """Issues, refreshes, checks and revokes sessions and their tokens."""

    def __init__(
        self,
        sessions: SessionRepository,
        codec: TokenCodec,
        *,
        clock: Clock = utcnow,
        events: EventBus | None = None,
        validity: DefinitionCache | None = None,
    ) -> None:
        self._validity = validity
        self._sessions = sessions
        self._codec = codec
        self._clock = clock
        self._events = events

    async def start(
        self, user_id: str, audience: str, *, access_lifetime_s: int, refresh_lifetime_s: int,
        user_agent: str = "", ip: str = "",
    ) -> tuple[Session, TokenPair]:
        """Create an active session for a login and its first token pair."""
        now = self._clock()
        session = Session(
            id=new_id(), user_id=user_id, audience=audience, refresh_jti=new_id(),
            created=now, last_used=now, user_agent=user_agent[:512], ip=ip,
        )
        await self._sessions.insert(session)
        return session, self._pair(session, access_lifetime_s, refresh_lifetime_s)

    def _pair(self, session: Session, access_lifetime_s: int, refresh_lifetime_s: int) -> TokenPair:
        access, _ = self._codec.issue(
            sub=session.user_id, sid=session.id, typ=ACCESS, aud=session.audience, lifetime_s=access_lifetime_s
        )
        refresh, _ = self._codec.issue(
            sub=session.user_id, sid=session.id, typ=REFRESH, aud=session.audience,
            lifetime_s=refresh_lifetime_s, jti=session.refresh_jti,
        )
        return TokenPair(access_token=access, refresh_token=refresh, expires_in=access_lifetime_s)

    async def refresh(
        self, refresh_token: str, audience: str, *, access_lifetime_s: int, refresh_lifetime_s: int,
        reuse_interval_s: int = 0,
    ) -> TokenPair:
        """Spend a refresh token for a new pair (lifetimes in seconds).

        With `reuse_interval_s` > 0, the token spent by the session's last rotation, presented
        again at most that many seconds after it, gets a pair for the same session whose refresh
        token carries the current jti (nothing is rotated, revoked or audited). Raises Unauthorized
        if the token is invalid, expired, of another audience, of a revoked session, or already
        spent outside that grace (which revokes the session and calls the reuse handler)."""
        claims = self._codec.decode(refresh_token, typ=REFRESH, audience=audience)
        session = await self._sessions.get(claims.sid)
        if session is None or session.revoked_at is not None or session.user_id != claims.sub:
            raise Unauthorized("Session has been revoked")
        rotated = replace(session, refresh_jti=new_id())
        now = self._clock()
        if not await self._sessions.rotate_refresh(session.id, claims.jti, rotated.refresh_jti, now):
            if reuse_interval_s > 0:
                # re-read: `session` predates the rotation that spent this token
                current = await self._sessions.get_if_just_rotated(
                    session.id, claims.jti, now - timedelta(seconds=reuse_interval_s)
                )
                if current is not None:
                    log.info("refresh token presented again within the reuse interval: session %s", session.id)
                    return self._pair(current, access_lifetime_s, refresh_lifetime_s)
            await self._sessions.revoke(session.id, now)
            await self._revoked()
            log.warning("refresh token reuse: session %s revoked", session.id)
            if self._events is not None:  # the audit log subscribes (a `critical` entry)
                await self._events.emit([SessionEvent(REFRESH_TOKEN_REUSE, session)])
            raise Unauthorized("Refresh token has already been used; the session is revoked")
        return self._pair(rotated, access_lifetime_s, refresh_lifetime_s)

    async def authenticate(self, access_token: str, audience: str) -> tuple[TokenClaims, Session]:
        """Check an access token and that its session is active. Raises Unauthorized.

        The session comes from the validity cache while the session epoch is unchanged (every
        revocation bumps it, on every replica at once: issue "Fast reads", item 6), else from
        MongoDB; `last_used` is written at most every TOUCH_INTERVAL either way."""
        claims = self._codec.decode(access_token, typ=ACCESS, audience=audience)
        session = await self.active(claims.sid, claims.sub)
        key = ("session", claims.sid)
        now = self._clock()
        if now - session.last_used > TOUCH_INTERVAL:
            await self._sessions.touch(session.id, now)
            if self._validity is not None:
                self._validity.update(key, replace(session, last_used=now))
        return claims, session

    async def active(self, session_id: str, user_id: str) -> Session:
        """The active session `session_id` of `user_id`, from the validity cache while the session
        epoch is unchanged (as `authenticate`, without a token: realtime re-checks its subscribers
        with it). Raises Unauthorized when it was revoked or is not that user's."""
        key = ("session", session_id)
        if self._validity is None:
            session = await self._sessions.get(session_id)
        else:
            session = await self._validity.get(key, lambda: self._sessions.get(session_id))
        if session is None or session.revoked_at is not None or session.user_id != user_id:
            raise Unauthorized("Session has been revoked")
        return session

    async def principal(self, session_id: str, load: Callable[[], Awaitable[Principal]]) -> Principal:
        """The principal of an authenticated session: `load()` (the user look-up) unless one is
        cached under the current session epoch, which every revocation, every change of a user
        (identity.systems) and every auth-collection change bumps on every replica."""
        if self._validity is None:
            return await load()
        return await self._validity.get(("principal", session_id), load)

    async def revoke(self, session_id: str, *, user_id: str | None = None) -> bool:
        """Revoke one session (of `user_id` when given). Returns False if no active one matched."""
        revoked = await self._sessions.revoke(session_id, self._clock(), user_id=user_id)
        await self._revoked()
        return revoked

    async def revoke_all(self, user_id: str, audience: str, *, keep: str | None = None) -> int:
        """Revoke all of a user's sessions in one user system, except `keep`. Returns the count."""
        count = await self._sessions.revoke_all(user_id, audience, self._clock(), keep=keep)
        await self._revoked()
        return count

    async def revoke_audience(self, audience: str) -> int:
        """Revoke every session of a user system (e.g. a deleted auth collection). Returns the count."""
        count = await self._sessions.revoke_audience(audience, self._clock())
        await self._revoked()
        return count

    async def epoch(self) -> str | None:
        """The session epoch (read once per request scope); None without a validity cache or when
        Redis failed. Every revocation, user change and API key deletion moves it."""
        return None if self._validity is None else await self._validity.epoch()

    async def invalidate(self) -> None:
        """Make every replica read sessions and principals from MongoDB again (a session epoch
        bump): after a restore replaced them, or a user changed."""
        await self._revoked()

    async def _revoked(self) -> None:
        """After a revocation (or a restore): every replica's cached sessions go at once."""
        if self._validity is not None:
            await self._validity.invalidate()

    async def list_active(self, user_id: str, audience: str) -> list[Session]:
        """The user's active sessions, newest first."""
        return await self._sessions.list_active(user_id, audience)
