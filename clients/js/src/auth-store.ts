/**
 * The auth store: who the client acts for (decisions.md, Identity and tokens). It holds the access
 * token, the refresh token, the signed-in user (`record`) and which user system issued them
 * (`collection`: an auth collection's name, or `null` for the admin table), tells listeners of each
 * change, and keeps its state in a pluggable `AuthStorage` (memory by default; pass `localStorage`
 * in a browser to keep a session across reloads).
 */
import type { AuthRecord } from "./types.js";

/** Where the store keeps its state: the `getItem`/`setItem`/`removeItem` part of the Web Storage API
 * (`localStorage`, `sessionStorage`) or anything with the same three methods. */
export interface AuthStorage {
  /** The stored text under `key`, or `null`. */
  getItem(key: string): string | null;
  /** Store `value` under `key`. */
  setItem(key: string, value: string): void;
  /** Forget `key`. */
  removeItem(key: string): void;
}

/** An `AuthStorage` in memory: the state lasts as long as the object. */
export class MemoryStorage implements AuthStorage {
  private readonly items = new Map<string, string>();

  /** The stored text under `key`, or `null`. */
  getItem(key: string): string | null {
    return this.items.get(key) ?? null;
  }

  /** Store `value` under `key`. */
  setItem(key: string, value: string): void {
    this.items.set(key, value);
  }

  /** Forget `key`. */
  removeItem(key: string): void {
    this.items.delete(key);
  }
}

/** What the store holds; empty strings and `null` when signed out. */
export interface AuthState {
  /** The access token (JWT), `""` when signed out. */
  token: string;
  /** The refresh token (JWT), `""` when none. */
  refreshToken: string;
  /** The signed-in user, as the login answer gave it. */
  record: AuthRecord | null;
  /** The auth collection whose user this is, or `null` for the admin table. */
  collection: string | null;
}

/** The claims of the API's JWTs (decisions.md): `sub`, `sid`, `jti`, `typ`, `aud`, `iat` and `exp` (Unix seconds). */
export interface TokenClaims {
  sub?: string;
  sid?: string;
  jti?: string;
  typ?: string;
  aud?: string;
  iat?: number;
  exp?: number;
  [claim: string]: unknown;
}

/** Called with the new state after every `save` and `clear`. */
export type AuthChangeListener = (state: Readonly<AuthState>) => void;

/** Options of `new AuthStore(...)`. */
export interface AuthStoreOptions {
  /** Where to keep the state; default a new `MemoryStorage`. */
  storage?: AuthStorage;
  /** The storage key; default `cms_auth`. */
  key?: string;
}

const EMPTY: AuthState = { token: "", refreshToken: "", record: null, collection: null };

/** The signed-in state of one client; see the module comment. */
export class AuthStore {
  private readonly storage: AuthStorage;
  private readonly key: string;
  private state: AuthState;
  private readonly listeners = new Set<AuthChangeListener>();

  /** A store over `options.storage` (memory by default), starting from what it already holds. */
  constructor(options: AuthStoreOptions = {}) {
    this.storage = options.storage ?? new MemoryStorage();
    this.key = options.key ?? "cms_auth";
    this.state = readState(this.storage.getItem(this.key));
  }

  /** The access token, `""` when signed out. */
  get token(): string {
    return this.state.token;
  }

  /** The refresh token, `""` when none. */
  get refreshToken(): string {
    return this.state.refreshToken;
  }

  /** The signed-in user, or `null`. */
  get record(): AuthRecord | null {
    return this.state.record;
  }

  /** The auth collection whose user is signed in, or `null` for the admin table (or nobody). */
  get collection(): string | null {
    return this.state.collection;
  }

  /** The access token's claims (not verified: the server does that), or `null` without a readable token. */
  get claims(): TokenClaims | null {
    return decodeClaims(this.state.token);
  }

  /** Whether there is an access token whose `exp` is still ahead (by this machine's clock). */
  get isValid(): boolean {
    const exp = this.claims?.exp;
    return typeof exp === "number" && exp * 1000 > Date.now();
  }

  /** Replace the state and tell the listeners. `collection` is the auth collection's name, `null` for the admin table. */
  save(token: string, refreshToken: string, record: AuthRecord | null = this.state.record,
    collection: string | null = this.state.collection): void {
    this.state = { token, refreshToken, record, collection };
    this.storage.setItem(this.key, JSON.stringify(this.state));
    this.emit();
  }

  /** Forget everything (signed out) and tell the listeners. */
  clear(): void {
    this.state = { ...EMPTY };
    this.storage.removeItem(this.key);
    this.emit();
  }

  /** Call `listener` after each change (and at once with `fireImmediately`); returns the function that stops it. */
  onChange(listener: AuthChangeListener, fireImmediately = false): () => void {
    this.listeners.add(listener);
    if (fireImmediately) {
      listener(this.state);
    }
    return () => {
      this.listeners.delete(listener);
    };
  }

  private emit(): void {
    for (const listener of [...this.listeners]) {
      listener(this.state);
    }
  }
}

/** The claims of a JWT (its middle part, base64url JSON), or `null` when `token` is not one. */
export function decodeClaims(token: string): TokenClaims | null {
  const part = token.split(".")[1];
  if (!part) {
    return null;
  }
  try {
    const base64 = part.replace(/-/g, "+").replace(/_/g, "/").padEnd(Math.ceil(part.length / 4) * 4, "=");
    const bytes = Uint8Array.from(atob(base64), (char) => char.charCodeAt(0));
    const claims: unknown = JSON.parse(new TextDecoder().decode(bytes));
    return typeof claims === "object" && claims !== null ? (claims as TokenClaims) : null;
  } catch {
    return null;
  }
}

function readState(text: string | null): AuthState {
  if (!text) {
    return { ...EMPTY };
  }
  try {
    const raw = JSON.parse(text) as Partial<AuthState>;
    return {
      token: typeof raw.token === "string" ? raw.token : "",
      refreshToken: typeof raw.refreshToken === "string" ? raw.refreshToken : "",
      record: raw.record ?? null,
      collection: typeof raw.collection === "string" ? raw.collection : null,
    };
  } catch {
    return { ...EMPTY };
  }
}
