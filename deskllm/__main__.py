from deskllm.cli import main

raise SystemExit(main())
