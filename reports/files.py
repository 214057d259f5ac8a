"""File modes for what reports and exports publish: as the umask says, not as mkstemp left them.

Why a module of its own: every writer here goes through a temporary file
(``mkstemp``, 0600; ``mkdtemp``, 0700) renamed into place so readers never
see half a file, and each of them must then give the file the mode a plain
``open`` would have. Kept free of matplotlib so ``export table`` stays light.
"""

from __future__ import annotations

import os


def umask() -> int:
    """The process's umask, read without changing it where Linux allows (``/proc``).

    Elsewhere it is read by setting and restoring it (``os.umask`` has no
    read-only form), which is what every other tool does.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def publish_mode(path: str | os.PathLike[str], directory: bool = False) -> None:
    """Give a file made by ``mkstemp``/``mkdtemp`` (0600/0700) the mode a plain ``open`` would.

    Why: temporary files are private by design, and a report renamed into
    place keeps that mode, so a web server or a colleague sees broken
    images. ``0666`` (``0777`` for folders) less the umask, like any other
    file the user writes.
    """
    os.chmod(path, (0o777 if directory else 0o666) & ~umask())
