"""Open the deskllm desktop app."""

import multiprocessing

from deskllm.app import main

if __name__ == "__main__":
    multiprocessing.freeze_support()
    raise SystemExit(main())
