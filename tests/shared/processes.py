"""Child processes a test started (an engine core, its workers), for checking shutdown."""

from __future__ import annotations


def engine_processes() -> set[int]:
    """Live descendant processes of this one: vLLM's engine core and workers.

    Python's multiprocessing resource tracker, which vLLM's first start spawns and
    which lives as long as this interpreter, is not counted.
    """
    import psutil  # a vLLM and SGLang dependency, imported where those sessions run

    pids = set()
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
            if any("resource_tracker" in part for part in child.cmdline()):
                continue
        except psutil.NoSuchProcess:
            continue
        pids.add(child.pid)
    return pids
