"""A progress bar (tqdm, when installed) over a download that another process writes.

pip and npm are run as subprocesses with their output captured (so that a failure
can be reported with its cause), which hides their own progress display. Instead,
the download's scratch folder is watched: the client writes the package file there
(pip through ``TMPDIR``), and the bar follows the largest file's size.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

__all__ = ["watch_download"]

#: Seconds between two looks at the folder.
POLL_S = 0.2


def _largest_file(folder: Path) -> int:
    sizes = [0]
    for path in folder.rglob("*"):
        with contextlib.suppress(OSError):  # files come and go while the client works
            if path.is_file():
                sizes.append(path.stat().st_size)
    return max(sizes)


@contextlib.contextmanager
def watch_download(
    folder: Path, total: int | None, label: str, *, enabled: bool | None = None
) -> Iterator[None]:
    """Show a byte progress bar for a file being downloaded into ``folder``.

    Args:
        folder: Where the client writes (its temporary files included).
        total: Expected size in bytes, or None if unknown (the bar then counts up).
        label: What is downloaded, shown before the bar.
        enabled: Force the bar on or off; by default it shows only when stderr is a
            terminal (tqdm's ``disable=None``), so logs and tests stay clean. Without
            tqdm (the ``assets`` extra brings it) there is no bar.
    """
    try:
        from tqdm.auto import tqdm
    except ImportError:
        yield
        return
    bar = tqdm(
        total=total,
        desc=label,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        file=sys.stderr,
        disable=None if enabled is None else not enabled,
        leave=True,
    )
    if bar.disable:
        yield
        return
    stop = threading.Event()

    def follow() -> None:
        while not stop.wait(POLL_S):
            bar.update(max(0, _largest_file(folder) - bar.n))

    watcher = threading.Thread(target=follow, name="genlm-download-progress", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join()
        bar.update(max(0, _largest_file(folder) - bar.n))
        bar.close()
