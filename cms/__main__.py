"""`python -m cms`: the same as the `cms` command."""

from cms.cli import main

main()
