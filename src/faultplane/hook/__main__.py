"""`python -m faultplane.hook`: the PreToolUse hook (same as `faultplane guard hook`)."""

from faultplane.hook.entry import main

raise SystemExit(main())
