"""`python3 -m clustercert_lab up|down|status|fault|heal|inventory ...`: the lab's program
(clustercert_lab.cli), what `clustercert lab ...` runs."""

from clustercert_lab.cli import main

raise SystemExit(main())
