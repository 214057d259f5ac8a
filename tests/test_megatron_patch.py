"""The Megatron-LM patch file: it applies, and it only calls into tracehouse.megatron_patch.

A real Megatron-LM core_v0.16.1 tree comes from ``MEGATRON_LM_DIR``, else
from a bare mirror of NVIDIA/Megatron-LM (``MEGATRON_LM_MIRROR``, default
``/work/.mirror/NVIDIA+Megatron-LM/repo``) via ``git archive`` of just the
patched files; without either the checkout test is skipped. The installed
megatron-core (the ``[megatron]`` extra) is the same release, so the
``schedules.py`` hunks are also checked against it.
"""

from __future__ import annotations

import os
import py_compile
import re
import shutil
import subprocess
import tarfile
from io import BytesIO
from pathlib import Path

import pytest

from tracehouse.megatron_patch import hooks, pp_timer

pytestmark = pytest.mark.slow  # ingests or builds (README: the fast set is -m "not slow")

ROOT = Path(__file__).resolve().parent.parent
PATCH = ROOT / "megatron_patch" / "megatron-lm-core_v0.16.1.patch"
SCRIPT = ROOT / "megatron_patch" / "check_patch.sh"
TAG = "core_v0.16.1"
PATCHED = ["megatron/training/initialize.py", "megatron/training/training.py",
           "megatron/core/pipeline_parallel/schedules.py"]


def patch_files() -> list[str]:
    return re.findall(r"^\+\+\+ b/(\S+)$", PATCH.read_text(), flags=re.MULTILINE)


def test_patch_touches_only_the_three_call_sites() -> None:
    assert patch_files() == PATCHED
    added = [line[1:] for line in PATCH.read_text().splitlines()
             if line.startswith("+") and not line.startswith("+++")]
    calls = set(re.findall(r"pp_timer\.(\w+)", "\n".join(added)))
    assert calls == {"timed", "start_step", "finish_step"}
    assert all(callable(getattr(pp_timer, name)) for name in calls)
    hook_calls = set(re.findall(r"import (\w+(?:, \w+)*)$", "\n".join(added), re.MULTILINE))
    for names in hook_calls:
        for name in names.split(", "):
            assert hasattr(hooks, name) or name == "pp_timer", name
    # Small: the logic lives in the module, the patch only calls it.
    assert len(added) < 80


def megatron_checkout(tmp_path: Path) -> Path:
    given = os.environ.get("MEGATRON_LM_DIR")
    if given:
        return Path(given)
    mirror = Path(os.environ.get("MEGATRON_LM_MIRROR", "/work/.mirror/NVIDIA+Megatron-LM/repo"))
    if not mirror.exists() or shutil.which("git") is None:
        pytest.skip("no Megatron-LM checkout: set MEGATRON_LM_DIR (core_v0.16.1) or "
                    "MEGATRON_LM_MIRROR (a git mirror of NVIDIA/Megatron-LM)")
    archive = subprocess.run(["git", "--git-dir", str(mirror), "archive", TAG, *PATCHED],
                             capture_output=True, timeout=120, check=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(tmp_path / "mlm", filter="data")
    return tmp_path / "mlm"


def test_check_patch_script_on_the_release(tmp_path: Path) -> None:
    checkout = megatron_checkout(tmp_path)
    result = subprocess.run(["sh", str(SCRIPT), str(checkout)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok: megatron-lm-core_v0.16.1.patch applies")
    if os.environ.get("MEGATRON_LM_DIR"):
        return
    subprocess.run(["git", "apply", str(PATCH)], cwd=checkout, check=True, timeout=60)
    for name in PATCHED:
        py_compile.compile(str(checkout / name), doraise=True)
    # Applied, it no longer applies: the script says so with a non-zero exit.
    again = subprocess.run(["sh", str(SCRIPT), str(checkout)], capture_output=True, text=True,
                           timeout=60)
    assert again.returncode != 0


def test_schedules_hunks_apply_to_installed_megatron_core(tmp_path: Path) -> None:
    import importlib.util

    spec = importlib.util.find_spec("megatron")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("megatron-core is not installed (pip install -e '.[megatron]')")
    site = Path(next(iter(spec.submodule_search_locations))).parent
    source = site / "megatron" / "core" / "pipeline_parallel" / "schedules.py"
    target = tmp_path / "megatron" / "core" / "pipeline_parallel" / "schedules.py"
    target.parent.mkdir(parents=True)
    shutil.copy(source, target)
    subprocess.run(["git", "apply", "--include=megatron/core/*", str(PATCH)], cwd=tmp_path,
                   check=True, timeout=60)
    text = target.read_text()
    assert text.count("pp_timer.timed(") == 6
    py_compile.compile(str(target), doraise=True)
