"""Copy single files out of wheels, sdists and npm tarballs without unpacking them."""

from __future__ import annotations

import shutil
import tarfile
import zipfile
from pathlib import Path

__all__ = ["copy_member"]


def _matches(member: str, suffix: str) -> bool:
    return member == suffix or member.endswith("/" + suffix)


def copy_member(archive: Path, suffix: str, dest: Path) -> Path:
    """Copy the one member of ``archive`` whose path ends with ``suffix`` to ``dest``.

    Sdists prefix every path with ``<name>-<version>/``, so members are matched by
    path suffix (on ``/`` boundaries) rather than by full path.

    Args:
        archive: A ``.whl``/``.zip`` or ``.tar.gz``/``.tgz`` file.
        suffix: Trailing part of the member path, e.g. ``"whisper/assets/gpt2.tiktoken"``.
        dest: File to write; its parent is created.

    Returns:
        ``dest``.

    Raises:
        FileNotFoundError: No member, or more than one, matches ``suffix``.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as zf:
            names = [n for n in zf.namelist() if _matches(n, suffix)]
            _check_one(archive, suffix, names)
            with zf.open(names[0]) as src, open(dest, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
        return dest
    with tarfile.open(archive, "r:*") as tf:
        members = [m for m in tf.getmembers() if m.isfile() and _matches(m.name, suffix)]
        _check_one(archive, suffix, [m.name for m in members])
        src = tf.extractfile(members[0])
        assert src is not None  # regular file
        with src, open(dest, "wb") as out:
            shutil.copyfileobj(src, out, 1 << 20)
    return dest


def _check_one(archive: Path, suffix: str, names: list[str]) -> None:
    if len(names) != 1:
        found = "none" if not names else ", ".join(names)
        raise FileNotFoundError(
            f"expected exactly one member ending in {suffix!r} in {archive.name}, found {found}; "
            f"the package file may be corrupt: delete {archive} and fetch again"
        )
