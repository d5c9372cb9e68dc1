"""Copy a wheel without the shared libraries a machine does not need (and their RECORD lines).

bitsandbytes' wheel (43 MB) carries a library per CUDA and ROCm version; a GPU machine
reached without network takes at most 64 MiB per call, so the kit keeps only the
libraries named with ``--keep`` (the one for its CUDA and the CPU one).

    python benchmarks/gpu/slim_wheel.py WHEEL OUT_DIR --keep libfoo_cuda130.so ...
"""

from __future__ import annotations

import argparse
import zipfile
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wheel", type=Path)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--keep", nargs="+", required=True, help="library file names to keep")
    args = parser.parse_args()
    target = args.out_dir / args.wheel.name
    with zipfile.ZipFile(args.wheel) as src:
        dropped = {
            item.filename
            for item in src.infolist()
            if item.filename.endswith(".so") and item.filename.rsplit("/", 1)[-1] not in args.keep
        }
        with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as dst:
            for item in src.infolist():
                if item.filename in dropped:
                    continue
                data = src.read(item)
                if item.filename.endswith(".dist-info/RECORD"):
                    lines = data.decode().splitlines(keepends=True)
                    data = "".join(ln for ln in lines if ln.split(",", 1)[0] not in dropped)
                    data = data.encode()
                dst.writestr(item, data)
    print(f"{target}: {target.stat().st_size / 2**20:.1f} MiB, dropped {len(dropped)} libraries")


if __name__ == "__main__":
    main()
