"""How the processes of a run live and die: a worker or kernel that ends with the process that started it.

Shared by the runner (chapter kernels) and the science (training workers); like :mod:`rankcollapse.store`,
it decides how runs are carried out, not what they compute, so no cache key includes its source.
"""

from __future__ import annotations

import os
import signal
import sys


def die_with_parent(sig: int = signal.SIGKILL, parent: int | None = None) -> bool:
    """Ask this process to receive ``sig`` when its parent exits (Linux only); ``parent``: the PID the parent
    should have (if it is already gone, ``sig`` is sent at once). Returns whether it could."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        PR_SET_PDEATHSIG = 1
        if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return False
    except OSError:
        return False
    if parent is not None and os.getppid() != parent:  # the parent died before the request took effect
        os.kill(os.getpid(), sig)
    return True
