"""Allow ``python -m kvadvisor``."""

from kvadvisor.cli import main

main()
