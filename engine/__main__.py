"""`python -m engine` runs the CLI."""

from engine.cli import main

main()
