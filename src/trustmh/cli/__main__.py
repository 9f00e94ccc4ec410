"""`python -m trustmh.cli` is the `trustmh` command."""

from . import main

main()
