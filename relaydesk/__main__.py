from relaydesk.cli import main

raise SystemExit(main())
