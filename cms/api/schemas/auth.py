"""Request bodies and queries of both user systems' auth endpoints (spec: Admin authentication, Auth
collection endpoints; decisions.md, Identity and tokens, Two-factor login)."""

from __future__ import annotations

from marshmallow import Schema, fields, validate

from cms.services.operations.settings import SETTINGS_DEFAULTS
from cms.web.schemas import MAX_CODE, MAX_PASSWORD, EmailAddress, EmailText

NEW_PASSWORD_DOC = {
    "minLength": SETTINGS_DEFAULTS["password_min_length"][0],
    "description": "checked against the password policy: the settings `password_min_length` (default "
                   f"{SETTINGS_DEFAULTS['password_min_length'][0]}) and `password_require_*`",
}
"""OpenAPI only: the default policy's length. The service checks the current policy (422)."""


class RegisterSchema(Schema):
    """Body of an admin-table register: `{email, password, password_confirm?, name?}`."""

    email = EmailAddress(required=True)
    password = fields.String(required=True, validate=validate.Length(max=MAX_PASSWORD), metadata=NEW_PASSWORD_DOC)
    password_confirm = fields.String(load_default=None, validate=validate.Length(max=MAX_PASSWORD))
    name = fields.String(load_default="", validate=validate.Length(max=200))


class RefreshSchema(Schema):
    """Body of a refresh: `{refresh_token}`."""

    refresh_token = fields.String(required=True, validate=validate.Length(max=4096))


class TokenBodySchema(Schema):
    """Body carrying one emailed one-time token: `{token}`."""

    token = fields.String(required=True, validate=validate.Length(min=1, max=512))


class PasswordResetRequestSchema(Schema):
    """Body of request-password-reset: `{email, collection?}`."""

    email = EmailText(required=True)
    collection = fields.String(
        load_default=None, validate=validate.Length(min=1, max=63),
        metadata={"description": "Name of an auth collection; omit for admin-table users"},
    )


class ForgotPasswordSchema(Schema):
    """Body of forgot-password: `{email}`."""

    email = EmailText(required=True)


class ResetPasswordSchema(Schema):
    """Body of reset-password: `{token, new_password, password_confirm?}`."""

    token = fields.String(required=True, validate=validate.Length(min=1, max=512))
    new_password = fields.String(required=True, validate=validate.Length(max=MAX_PASSWORD), metadata=NEW_PASSWORD_DOC)
    password_confirm = fields.String(load_default=None, validate=validate.Length(max=MAX_PASSWORD))


AUTH_REGISTER_KEYS = ("email", "password", "password_confirm")


class CollectionRegisterSchema(Schema):
    """`email`, `password`, optional `password_confirm`, plus the collection's schema fields."""

    class Meta:
        """marshmallow options."""

        unknown = "include"  # marshmallow.INCLUDE: the schema fields are checked by the collection's schema

    email = EmailAddress(required=True)
    password = fields.String(required=True, validate=validate.Length(max=MAX_PASSWORD))
    password_confirm = fields.String(load_default=None, validate=validate.Length(max=MAX_PASSWORD))


class ChangePasswordSchema(Schema):
    """Body of change-password: `{old_password, new_password, password_confirm?}`."""

    old_password = fields.String(required=True, validate=validate.Length(max=MAX_PASSWORD))
    new_password = fields.String(required=True, validate=validate.Length(max=MAX_PASSWORD), metadata=NEW_PASSWORD_DOC)
    password_confirm = fields.String(load_default=None, validate=validate.Length(max=MAX_PASSWORD))


class EmailChangeRequestSchema(Schema):
    """Body of request-email-change: `{new_email, password}` (the current password)."""

    new_email = EmailAddress(required=True)
    password = fields.String(required=True, validate=validate.Length(max=MAX_PASSWORD),
                             metadata={"description": "The current password"})


class OtpRequestSchema(Schema):
    """Body of otp/request: `{email}`."""

    email = EmailText(required=True)


class OtpVerifySchema(Schema):
    """Body of otp/verify: `{email, code}` (6 digits)."""

    email = EmailText(required=True)
    code = fields.String(required=True, validate=validate.Regexp(r"^[0-9]{6}\Z", error="Must be 6 digits."))


class TwoFactorCodeSchema(Schema):
    """Body of 2fa/enable: `{code}` (a TOTP code)."""

    code = fields.String(required=True, validate=validate.Length(min=1, max=MAX_CODE))


class TwoFactorDisableSchema(Schema):
    """Body of 2fa/disable: `{password, code}` (a TOTP or recovery code)."""

    password = fields.String(required=True, validate=validate.Length(max=MAX_PASSWORD))
    code = fields.String(required=True, validate=validate.Length(min=1, max=MAX_CODE),
                         metadata={"description": "A TOTP code or a recovery code"})


_REDIRECT_URI = [validate.Length(min=1, max=2048), validate.Regexp(r"^https?://", error="Must be an http(s) URL.")]


class OAuthProvidersQuerySchema(Schema):
    """Query of oauth2/providers: `redirect_uri?` (http or https)."""

    redirect_uri = fields.String(load_default=None, validate=_REDIRECT_URI,
                                 metadata={"description": "Where the provider sends the user back; without "
                                                          "it auth_url ends in `&redirect_uri=` for the client"})


class OAuthCallbackSchema(Schema):
    """Body of oauth2/callback: `{provider, code, code_verifier, state, redirect_uri}`."""

    provider = fields.String(required=True, validate=validate.Length(min=1, max=32))
    code = fields.String(required=True, validate=validate.Length(min=1, max=4096))
    code_verifier = fields.String(required=True, validate=validate.Regexp(
        r"^[A-Za-z0-9._~-]{43,128}\Z", error="Must be 43 to 128 characters of A-Z a-z 0-9 . _ ~ - (RFC 7636)."))
    state = fields.String(required=True, validate=[validate.Length(min=1, max=2048), validate.Regexp(
        r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\Z", error="Must be a state from oauth2/providers.")])
    redirect_uri = fields.String(required=True, validate=_REDIRECT_URI)
