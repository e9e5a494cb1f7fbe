"""Open the deskllm desktop app (with arguments: the `deskllm` command line)."""

from deskllm.entry import main

if __name__ == "__main__":
    raise SystemExit(main())
