#!/usr/bin/env python3
"""Nsight Systems benchmark: the commands a user runs, tracehouse against nsys-ai, same run.

For every export, each command runs as its own process, cold, and is timed
wall-clock with its peak RSS (``ru_maxrss`` of the process tree, from
``wait4``: the largest process in it, as ``/usr/bin/time -v`` reports):

* ``tracehouse nsys summary FILE``: a fresh temporary warehouse (its
  default), so ingest, the dbt build of the nsys marts and the query;
* ``tracehouse ingest FILE --warehouse NEW``: the load alone;
* ``nsys-ai summary COPY``: on a copy in a fresh folder, so no nsys-ai cache
  lies beside it (it writes one there). Offline its DuckDB path tries to
  download the sqlite extension, fails, and falls back to sqlite3: that
  wait is part of what a user on such a machine gets, and of its figure.

Every figure is printed with its ratio to nsys-ai's in the same run. The
shared exports are small (2-3 MB); ``--size-mb M [M ...]`` also measures the
first export scaled up to at least each M MB (``benchmarks/nsys_scale.py``),
written to a temporary folder outside the repository and removed afterwards.

``--baseline DIR`` also runs both tracehouse commands from another checkout
(``git archive COMMIT | tar -x -C DIR``, with this checkout's built
``ingest/*.so`` copied in), alternating with the others, so a change is
measured against its parent under the same load. DIR is put first on
``PYTHONPATH``; the links Python needs there to find ``tracehouse.ingest``
(``tracehouse/ingest -> ../ingest``, as ``pyproject.toml`` maps it) are made
if missing.

    python benchmarks/nsys.py [FILE ...] [--repeat R] [--size-mb M [M ...]]
                              [--baseline DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NSYS = REPO.parent / "shared" / "data" / "nsys"
DEFAULT_FILES = [NSYS / "mfu_2gpu_before.sqlite", NSYS / "h100_2gpu_1s.sqlite"]
BIN = Path(sys.executable).parent
SIDES = ("nsys-ai summary", "tracehouse nsys summary", "tracehouse ingest")
PEER = SIDES[0]
#: Suffix of a side run from the ``--baseline`` checkout.
BASELINE = " (baseline)"
#: Subpackages pyproject.toml maps from top-level folders (package-dir).
MAPPED = ("ingest", "reports", "megatron_patch")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nsys_scale import factor_for_size, scale_export  # noqa: E402


def _command(side: str, file: Path, scratch: Path) -> list[str]:
    side = side.removesuffix(BASELINE)
    if side == "nsys-ai summary":
        copy = scratch / file.name
        shutil.copyfile(file, copy)
        return [str(BIN / "nsys-ai"), "summary", str(copy)]
    if side == "tracehouse nsys summary":
        return [str(BIN / "tracehouse"), "nsys", "summary", str(file)]
    return [str(BIN / "tracehouse"), "ingest", "-q", str(file), "--warehouse",
            str(scratch / "wh")]


def prepare_baseline(root: Path) -> Path:
    """``root`` (a checkout) made importable as ``tracehouse``, by the links pyproject maps."""
    root = root.resolve()
    if not (root / "tracehouse" / "__init__.py").is_file():
        raise SystemExit(f"{root}: not a tracehouse checkout (no tracehouse/__init__.py)")
    for name in MAPPED:
        link = root / "tracehouse" / name
        if not link.exists() and (root / name).is_dir():
            link.symlink_to(Path("..") / name)
    return root


def measure(side: str, file: Path, baseline: Path | None = None) -> dict[str, float]:
    """One cold run of ``side`` on ``file``: wall seconds and peak RSS (MiB) of its tree."""
    with tempfile.TemporaryDirectory(prefix="nsys-bench-") as tmp:
        command = _command(side, file, Path(tmp))
        env = {**os.environ, "TMPDIR": tmp}
        if side.endswith(BASELINE) and baseline is not None:
            env["PYTHONPATH"] = os.pathsep.join(
                [str(baseline), *filter(None, [os.environ.get("PYTHONPATH")])])
        started = time.perf_counter()
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                env=env, cwd=tmp)
        _pid, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - started
        stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        proc.stderr and proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{stderr[-2000:]}")
    return {"seconds": seconds, "peak_rss_mib": usage.ru_maxrss / 1024}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, default=DEFAULT_FILES)
    parser.add_argument("--repeat", type=int, default=3, help="runs per command, alternating")
    parser.add_argument("--size-mb", type=float, nargs="+", default=[], metavar="M",
                        help="also measure the first export scaled up to >= M MB (each M)")
    parser.add_argument("--baseline", type=Path, metavar="DIR",
                        help="also run the tracehouse commands from this checkout")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    scratch = tempfile.TemporaryDirectory(prefix="nsys-bench-scaled-")
    files = [file.resolve() for file in args.files]
    src = files[0]
    for size_mb in args.size_mb:
        factor = factor_for_size(src, size_mb, Path(scratch.name))
        files.append(scale_export(src, Path(scratch.name) / f"{src.stem}_x{factor}.sqlite",
                                  factor))
    baseline = prepare_baseline(args.baseline) if args.baseline else None
    sides = SIDES + ((SIDES[1] + BASELINE, SIDES[2] + BASELINE) if baseline else ())
    rows = []
    print(f"{'file':<30} {'MB':>7} {'command':<35} {'median s':>9} {'x nsys-ai':>9} "
          f"{'peak MiB':>9} {'x nsys-ai':>9} {'x file':>7}")
    for file in files:
        size_mb = file.stat().st_size / 1e6
        runs: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
        for _ in range(args.repeat):
            for side in sides:
                runs[side].append(measure(side, file, baseline))
        figures = {side: (statistics.median(r["seconds"] for r in runs[side]),
                          max(r["peak_rss_mib"] for r in runs[side])) for side in sides}
        peer_s, peer_mib = figures[PEER]
        for side in sides:
            seconds, peak = figures[side]
            rows.append({"file": file.name, "size_mb": size_mb, "command": side,
                         "median_seconds": seconds, "seconds_ratio": seconds / peer_s,
                         "peak_rss_mib": peak, "peak_ratio": peak / peer_mib,
                         "peak_over_file": peak * 2**20 / file.stat().st_size,
                         "runs": runs[side]})
            print(f"{file.name:<30} {size_mb:>7.1f} {side:<35} {seconds:>9.2f} "
                  f"{seconds / peer_s:>9.2f} {peak:>9.0f} {peak / peer_mib:>9.2f} "
                  f"{rows[-1]['peak_over_file']:>7.2f}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    scratch.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
