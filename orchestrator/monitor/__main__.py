"""`python -m orchestrator.monitor [options]`: the sidecar without the gpuctl CLI."""

from __future__ import annotations

import argparse
import sys

from orchestrator.errors import GpuctlError
from orchestrator.monitor.app import add_monitor_arguments, run_monitor


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orchestrator.monitor", description="GPU monitor sidecar")
    add_monitor_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run_monitor(args)
    except GpuctlError as err:
        print(f"gpuctl monitor: error: {err.message}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
