"""The admin screens: one module per screen, each exposing `routes()` (see ../HACKING.md)."""
