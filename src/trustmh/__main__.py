"""`python -m trustmh` is the `trustmh` command (for environments where the script is not on PATH)."""

from .cli import main

main()
