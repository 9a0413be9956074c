"""`python -m faultplane …` is the `faultplane` command."""

from faultplane.cli.entry import main

main()
