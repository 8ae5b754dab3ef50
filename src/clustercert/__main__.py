from clustercert.cli import main

raise SystemExit(main())
