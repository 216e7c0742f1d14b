"""The `cms` command's subcommands that live apart from `cms.cli` (the parser and entry point)."""
