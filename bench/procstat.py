"""What /proc says about a process, for the benches that measure the services' CPU."""

from __future__ import annotations

import os
from pathlib import Path


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds `pid` has used (every thread), from /proc/PID/stat.

    Raises:
        OSError: the process is gone or not readable.
    """
    # After "pid (comm)": field 3 is the state, so utime and stime (fields 14, 15) are at 11, 12.
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
