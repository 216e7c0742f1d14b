"""Operations: backups, settings, the audit log, system health and statistics, and rate limits."""
