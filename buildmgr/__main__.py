from buildmgr.cli import main

raise SystemExit(main())
