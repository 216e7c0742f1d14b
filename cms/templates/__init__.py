"""Email templates (text and HTML) rendered by the mail service."""
