from deskllm.entry import main

raise SystemExit(main())
