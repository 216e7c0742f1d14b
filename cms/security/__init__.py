"""Pure security helpers: passwords (argon2id), JWTs (HS256), one-time codes and keys, webhook signatures."""
