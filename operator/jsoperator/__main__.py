"""`python -m jsoperator` = the `jsoperator` command."""

from .cli import main

raise SystemExit(main())
