"""The chapter kernel's entry point: ``ipykernel_launcher`` that dies with the runner that started it.

``rcbook`` starts every chapter's kernel through this module (see ``runner.LocalKernelManager``). On Linux
it first asks the kernel (``prctl(PR_SET_PDEATHSIG)``) to receive SIGKILL the moment its parent, the runner,
ends for any reason, SIGKILL included, so a killed ``rcbook`` leaves no kernel training on. Elsewhere it is
plain ``ipykernel_launcher``. Nothing here changes what a chapter computes.
"""

from __future__ import annotations

import os
import signal

from ..procs import die_with_parent


def terminate_gracefully() -> None:
    """SIGTERM raises KeyboardInterrupt, as Ctrl-C does: the run cleans up (kernel shut down, partial folder
    removed) and a rerun resumes from the last checkpoint."""

    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)


if __name__ == "__main__":
    pid = os.environ.get("RCBOOK_RUNNER_PID")
    die_with_parent(signal.SIGKILL, int(pid) if pid and pid.isdigit() else None)
    from ipykernel import kernelapp

    kernelapp.launch_new_instance()
