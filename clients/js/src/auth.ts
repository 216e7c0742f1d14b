/**
 * Both user systems, written once (decisions.md, Identity and tokens; Two-factor login): the admin
 * table at `/api/v1/auth` (`client.auth`) and each auth collection at
 * `/api/v1/collections/{name}/auth` (`client.collection(name).auth`, which adds the emailed-code
 * login). A completed login is saved in the client's auth store; a login that needs a second factor
 * answers `requires_2fa: true` with an `mfa_token`, and `verify2fa(mfa_token, code)` completes it.
 */
import type { CmsClient } from "./client.js";
import type {
  AdminUser, AnyLoginResponse, CollectionLoginResponse, CollectionUser, LoginResponse, Message, OAuthProvider,
  RecoveryCodes, Session, TokenPair, TwoFactorSetup,
} from "./types.js";

/** The path prefix of a user system: `/api/v1/auth`, or `/api/v1/collections/{name}/auth` for an auth collection. */
export function authPrefix(collection: string | null): string {
  return collection === null ? "/api/v1/auth" : `/api/v1/collections/${encodeURIComponent(collection)}/auth`;
}

/** What completing an OAuth2 login takes: the provider's `code` and `state` from the redirect, and the
 * `codeVerifier` and `redirectUri` used when the login started. */
export interface OAuth2Completion {
  provider: string;
  code: string;
  state: string;
  codeVerifier: string;
  redirectUri: string;
}

/** One user system's auth calls; `L` is its login answer, `U` its user. */
export class AuthService<L extends AnyLoginResponse = LoginResponse, U = AdminUser> {
  /** The client the calls go through. */
  protected readonly client: CmsClient;
  /** The auth collection's name, or `null` for the admin table. */
  readonly collection: string | null;
  /** The path prefix of this user system. */
  readonly prefix: string;

  /** The user system of `collection` (`null`: the admin table) on `client`. */
  constructor(client: CmsClient, collection: string | null) {
    this.client = client;
    this.collection = collection;
    this.prefix = authPrefix(collection);
  }

  /** Sign in with email and password. A complete login is saved in the auth store; with 2FA on, the
   * answer has `requires_2fa: true` and an `mfa_token` for `verify2fa`. 401 `invalid_credentials` on a bad pair. */
  authWithPassword(email: string, password: string): Promise<L> {
    return this.login("/login", { email, password });
  }

  /** Complete a login that answered `requires_2fa` with a TOTP code (or a recovery code); saved in the
   * auth store. 400 `otp_invalid` (wrong code), `token_invalid` / `token_expired` (the `mfa_token`). */
  verify2fa(mfaToken: string, code: string): Promise<L> {
    return this.login("/2fa/verify", { mfa_token: mfaToken, code });
  }

  /** Start 2FA for the signed-in user: `{secret (base32), otpauth_url, qr_svg}`. */
  setup2fa(): Promise<TwoFactorSetup> {
    return this.client.send<TwoFactorSetup>(`${this.prefix}/2fa/setup`, { method: "POST" });
  }

  /** Turn 2FA on with a first TOTP `code` from the secret of `setup2fa`: `{recovery_codes}`. */
  enable2fa(code: string): Promise<RecoveryCodes> {
    return this.client.send<RecoveryCodes>(`${this.prefix}/2fa/enable`, { method: "POST", body: { code } });
  }

  /** Turn 2FA off (the password and a current code). */
  disable2fa(password: string, code: string): Promise<Message> {
    return this.client.send<Message>(`${this.prefix}/2fa/disable`, { method: "POST", body: { password, code } });
  }

  /** The configured OAuth2 providers, each with an `auth_url` (PKCE S256), its `state` and `code_verifier`.
   * Keep `state` and `code_verifier` (e.g. in `sessionStorage`) while the user is at the provider. */
  oauth2Providers(redirectUri?: string): Promise<OAuthProvider[]> {
    return this.client.send<OAuthProvider[]>(`${this.prefix}/oauth2/providers`, {
      query: { redirect_uri: redirectUri }, auth: false,
    });
  }

  /** Where to send the user for `provider`: its `auth_url`, completed with `redirectUri` when it was
   * listed without one (the URL then ends in `&redirect_uri=`). */
  oauth2AuthorizeUrl(provider: OAuthProvider, redirectUri: string): string {
    return provider.auth_url.endsWith("redirect_uri=")
      ? `${provider.auth_url}${encodeURIComponent(redirectUri)}`
      : provider.auth_url;
  }

  /** Finish an OAuth2 login with what the provider sent back (`code`, `state`, see `parseOAuth2Redirect`);
   * saved in the auth store like any login. */
  authWithOAuth2Code(completion: OAuth2Completion): Promise<L> {
    return this.login("/oauth2/callback", {
      provider: completion.provider, code: completion.code, state: completion.state,
      code_verifier: completion.codeVerifier, redirect_uri: completion.redirectUri,
    });
  }

  /** Rotate the token pair now (the old refresh token is spent); the auth store is updated. Shares
   * one request with every other refresh in flight. */
  refresh(): Promise<TokenPair> {
    return this.client.refresh();
  }

  /** Revoke the auth store's session on the server and clear the store (cleared even when the server
   * refuses). The admin table has `POST /auth/logout`; an auth collection revokes the session by its id
   * (`DELETE .../auth/sessions/{sid}`, the `sid` claim). */
  async logout(): Promise<void> {
    const store = this.client.authStore;
    const sid = store.claims?.sid;
    try {
      if (store.collection === null) {
        await this.client.send<Message>(`${authPrefix(null)}/logout`, { method: "POST" });
      } else if (typeof sid === "string") {
        await this.client.send<void>(`${authPrefix(store.collection)}/sessions/${encodeURIComponent(sid)}`,
          { method: "DELETE" });
      }
    } finally {
      store.clear();
    }
  }

  /** The signed-in user, fresh from the server. */
  me(): Promise<U> {
    return this.client.send<U>(`${this.prefix}/me`);
  }

  /** Create an account (`{email, password, ...}`; an auth collection also takes its own fields). 201
   * `{user, message}`; a verification email is sent. Does not sign in. */
  register(data: { email: string; password: string; [field: string]: unknown }): Promise<{ user: U; message: string }> {
    return this.client.send(`${this.prefix}/register`, { method: "POST", body: data, auth: false });
  }

  /** Email a password-reset link (1 hour, single use) to `email`, a user of this system. The answer is
   * the same `{message}` whether or not the address exists. 429 past the mail limit per address. */
  requestPasswordReset(email: string): Promise<Message> {
    return this.client.send<Message>(`${authPrefix(null)}/request-password-reset`, {
      method: "POST", body: { email, collection: this.collection ?? undefined }, auth: false,
    });
  }

  /** Set a new `password` with the `token` of the emailed reset link (its `?token=`); every session of
   * that user is revoked. 400 `token_invalid` / `token_expired`; 422 for a password the policy refuses. */
  confirmPasswordReset(token: string, password: string): Promise<Message> {
    return this.client.send<Message>(`${authPrefix(null)}/reset-password`, {
      method: "POST", body: { token, new_password: password }, auth: false,
    });
  }

  /** Email the signed-in user a new verification link (older links stop working). Registering sends
   * the first one. */
  requestVerification(): Promise<Message> {
    return this.client.send<Message>(`${this.prefix}/resend-verification`, { method: "POST" });
  }

  /** Verify an address with the `token` of the emailed link; the user becomes `verified`. 400
   * `token_invalid` / `token_expired` (24 h). */
  confirmVerification(token: string): Promise<Message> {
    return this.client.send<Message>(`${this.prefix}/verify-email`, { method: "POST", body: { token }, auth: false });
  }

  /** Change the signed-in user's password: the user's other sessions are revoked, this one goes on.
   * 422 for a wrong `oldPassword` or a new one the policy refuses. */
  changePassword(oldPassword: string, newPassword: string): Promise<Message> {
    return this.client.send<Message>(`${this.prefix}/me/change-password`, {
      method: "POST", body: { old_password: oldPassword, new_password: newPassword },
    });
  }

  /** The signed-in user's active sessions, newest first: `[{id, created, last_used, user_agent, ip,
   * current}]` (`current`: the session of the auth store's token). */
  listSessions(): Promise<Session[]> {
    return this.client.send<Session[]>(`${this.prefix}/sessions`);
  }

  /** Revoke one of the signed-in user's sessions (its tokens stop working at once; 404 when it is not
   * an active session of the user). Revoking the auth store's own session clears the store. */
  async revokeSession(id: string): Promise<void> {
    await this.client.send<void>(`${this.prefix}/sessions/${encodeURIComponent(id)}`, { method: "DELETE" });
    if (this.client.authStore.claims?.sid === id) {
      this.client.authStore.clear();
    }
  }

  /** Revoke every session of the signed-in user but the auth store's own: how many were revoked. */
  async revokeOtherSessions(): Promise<number> {
    const others = (await this.listSessions()).filter((session) => !session.current);
    for (const session of others) {
      await this.client.send<void>(`${this.prefix}/sessions/${encodeURIComponent(session.id)}`, { method: "DELETE" });
    }
    return others.length;
  }

  /** Revoke every session of the signed-in user, the auth store's own included (sign out everywhere),
   * and clear the store. */
  async revokeAllSessions(): Promise<void> {
    await this.client.send<void>(`${this.prefix}/sessions/all`, { method: "DELETE" });
    this.client.authStore.clear();
  }

  /** POST `body` to a login endpoint and keep a complete login in the auth store. */
  protected async login(path: string, body: Record<string, string>): Promise<L> {
    const answer = await this.client.send<L>(`${this.prefix}${path}`, { method: "POST", body, auth: false });
    const token = answer.token as TokenPair | null;
    if (token && !answer.requires_2fa) {
      this.client.authStore.save(token.access_token, token.refresh_token, answer.user, this.collection);
    }
    return answer;
  }
}

/** An auth collection's user system: the shared calls plus the emailed one-time code (OTP) login. */
export class CollectionAuthService extends AuthService<CollectionLoginResponse, CollectionUser> {
  /** The user system of the auth collection `collection` on `client`. */
  constructor(client: CmsClient, collection: string) {
    super(client, collection);
  }

  /** Email a 6-digit login code to `email` (the same answer whether or not the address exists);
   * 403 `otp_disabled` when the collection's `otp_enabled` is off. */
  requestOtp(email: string): Promise<Message> {
    return this.client.send<Message>(`${this.prefix}/otp/request`, { method: "POST", body: { email }, auth: false });
  }

  /** Sign in with the emailed `code`; saved in the auth store (or `requires_2fa`). 400 `otp_invalid` on a wrong code. */
  authWithOtp(email: string, code: string): Promise<CollectionLoginResponse> {
    return this.login("/otp/verify", { email, code });
  }

  /** Email a confirmation link to `newEmail` for the signed-in user (`password`: the current one). 400
   * `already_exists` when the address is taken; 422 for a wrong password. Only auth collections have it. */
  requestEmailChange(newEmail: string, password: string): Promise<Message> {
    return this.client.send<Message>(`${this.prefix}/me/request-email-change`, {
      method: "POST", body: { new_email: newEmail, password },
    });
  }

  /** Change the address with the `token` of the emailed link: it is then verified, the old address gets
   * a notice and every session of the user is revoked (sign in again; a store holding one of them is
   * cleared by its next refresh). 400 `token_invalid` / `token_expired` / `already_exists`. */
  confirmEmailChange(token: string): Promise<Message> {
    return this.client.send<Message>(`${this.prefix}/me/confirm-email-change`, {
      method: "POST", body: { token }, auth: false,
    });
  }
}

/** The `code` and `state` (or the provider's `error`) of the URL the OAuth2 provider sent the user back to. */
export function parseOAuth2Redirect(url: string): { code: string | null; state: string | null; error: string | null } {
  const params = new URL(url).searchParams;
  return { code: params.get("code"), state: params.get("state"), error: params.get("error") };
}
