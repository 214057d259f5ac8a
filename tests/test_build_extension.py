"""The compiled scanner builds with a plain ``pip install .``, and its absence is fine.

``setup.py`` declares the extension ``optional``: with a C compiler the
wheel carries ``tracehouse/ingest/_kineto_scan*.so``; without one (``CC``
pointing at ``false``) the wheel still builds, without it, and ingest runs
the msgspec decoder (``tests/test_ingest_decoders.py`` checks it says so once).
Built from a copy of the sources in a temporary folder, offline
(``--no-build-isolation``: setuptools comes from this environment).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SOURCES = ["pyproject.toml", "setup.py", "README.md", "ingest", "tracehouse", "reports",
           "megatron_patch"]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("gcc") is None and shutil.which("cc") is None,
                       reason="no C compiler on this machine"),
]


def _wheel(tmp_path: Path, env: dict[str, str]) -> list[str]:
    src = tmp_path / "src"
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns(
                "__pycache__", "*.so", "*.egg-info"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy(path, src / name)
    out = tmp_path / "wheel"
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps",
                           "--no-build-isolation", "-q", "-w", str(out)],
                          capture_output=True, text=True, timeout=300, env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = out.glob("*.whl")
    return zipfile.ZipFile(wheel).namelist()


def test_plain_install_builds_the_scanner(tmp_path: Path) -> None:
    names = _wheel(tmp_path, {})
    assert any(n.startswith("tracehouse/ingest/_kineto_scan") and n.endswith(".so")
               for n in names), names


def test_without_a_compiler_the_install_still_succeeds(tmp_path: Path) -> None:
    names = _wheel(tmp_path, {"CC": "false", "LDSHARED": "false"})
    assert "tracehouse/ingest/kineto/native.py" in names
    assert not any(n.endswith(".so") for n in names)
