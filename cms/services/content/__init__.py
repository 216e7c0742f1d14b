"""Content: collections and their fields, records (reads, writes, group commit), relations, schema
changes, CSV import and export, and files."""
