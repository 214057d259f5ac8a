"""Short, readable kernel names: one helper for the charts, the HTML page and the Perfetto export.

Why one module: a kernel is ``void at::native::vectorized_elementwise_kernel<4,
at::native::BinaryFunctor<…>>(int, …)``, hundreds of characters of C++, and a
person looking for it should meet the same short name on the top-kernels
chart, in the report's table and on the Perfetto timeline. So every place
that shortens a name calls :func:`short_kernel_name` (or
:func:`unique_labels`, which also keeps different kernels apart); none has a
rule of its own. No matplotlib or pandas here: the Perfetto export imports it.
"""

from __future__ import annotations

import os

#: Longest kernel label on a chart, in characters.
LABEL_LIMIT = 60


def plain_text(text: object) -> str:
    """A trace string safe to hand to matplotlib: one line, printable, no mathtext.

    matplotlib parses ``$…$`` as TeX math (and raises on malformed math), so
    dollars are escaped; newlines and control characters become spaces.
    """
    cleaned = "".join(ch if ch.isprintable() else " " for ch in str(text))
    return " ".join(cleaned.split()).replace("$", r"\$")


def short_kernel_name(name: str, limit: int = LABEL_LIMIT) -> str:
    """A readable label for a kernel name (not escaped for matplotlib; see :func:`plain_text`).

    ``void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<…>>(int, …)``
    becomes ``vectorized_elementwise_kernel<BinaryFunctor…>``: return type,
    parameter list and namespaces go, the template arguments shrink to the
    first type that names what the kernel does. Names without templates that
    are still too long keep their start and end around an ellipsis (GEMM
    names differ in the middle as often as at the end). Short names are kept
    as they are, parameter list aside.
    """
    text = " ".join("".join(ch if ch.isprintable() else " " for ch in name).split())
    text = text.replace("(anonymous namespace)::", "")
    for prefix in ("void ", "static ", "__global__ "):
        text = text.removeprefix(prefix)
    if text.endswith(")") or len(text) > limit:
        text = _cut_parameters(text)
    if len(text) <= limit:
        return text or name[:limit]
    base, hints = _template_parts(text)
    if base:
        text = f"{base}<{hints[0]}…>" if hints else f"{base}<…>"
    if len(text) > limit:
        head = (limit - 1) * 3 // 5
        text = text[:head] + "…" + text[len(text) - (limit - 1 - head):]
    return text


def _first_depth0(text: str, char: str) -> int:
    """Index of the first ``char`` outside brackets, or -1."""
    depth = 0
    for i, ch in enumerate(text):
        if ch == char and depth == 0:
            return i
        if ch in "<({[":
            depth += 1
        elif ch in ">)}]":
            depth = max(0, depth - 1)
    return -1


def _cut_parameters(text: str) -> str:
    """Drop the parameter list: everything from the first ``(`` outside template brackets."""
    depth = 0
    for i, ch in enumerate(text):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif ch == "(" and depth == 0 and i > 0:
            return text[:i]
    return text


def _template_parts(text: str) -> tuple[str, list[str]]:
    """``(name without namespaces, type hints of its template arguments)``; ``""`` if none."""
    open_at = _first_depth0(text, "<")
    if open_at <= 0:
        return "", []
    return text[:open_at].split("::")[-1].strip(), _type_hints(text[open_at + 1:])


def _type_hints(arguments: str) -> list[str]:
    """The last name component of each template argument that is a type, not a number."""
    parts: list[str] = []
    depth, current = 0, []
    for ch in arguments:
        if ch in "<({[":
            depth += 1
        elif ch in ">)}]":
            if depth == 0:
                break  # the end of the template argument list
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    hints = []
    for part in parts:
        part = part.strip()
        if not part or part in ("true", "false") or part[0].isdigit() or part[0] == "-":
            continue
        for stop in ("(", "<"):
            cut = part.find(stop)
            if cut > 0:
                part = part[:cut]
        part = part.split("::")[-1].strip()
        if part:
            hints.append(part)
    return hints


def unique_labels(names: list[str], limit: int = LABEL_LIMIT) -> dict[str, str]:
    """Short labels for ``names``; where two shorten alike, their labels show where they differ.

    Kernels that still share a label are numbered ``[2]``, ``[3]``, ….
    """
    labels = {name: short_kernel_name(name, limit) for name in names}
    groups: dict[str, list[str]] = {}
    for name, label in labels.items():
        groups.setdefault(label, []).append(name)
    for members in groups.values():
        if len(members) < 2:
            continue
        parts = {name: _template_parts(_cut_parameters(
            " ".join(name.split()).removeprefix("void "))) for name in members}
        if all(base for base, _ in parts.values()):
            # Template kernels: show the first type argument in which they differ.
            hint_lists = [hints for _, hints in parts.values()]
            width = max(len(h) for h in hint_lists)
            differ = next((i for i in range(width)
                           if len({tuple(h[i:i + 1]) for h in hint_lists}) > 1), None)
            if differ is not None:
                for name, (base, hints) in parts.items():
                    hint = hints[differ] if differ < len(hints) else ""
                    text = f"{base}<…{hint}…>"
                    labels[name] = text if len(text) <= limit else text[: limit - 1] + "…"
                continue
        full = {name: short_kernel_name(name, 10_000) for name in members}
        common = len(os.path.commonprefix(list(full.values())))
        for name, text in full.items():
            if len(text) <= limit:
                labels[name] = text
                continue
            head = min(len(text), common + 12)
            tail = limit - 1 - head
            labels[name] = (text[:head] + "…" + text[-tail:]) if tail >= 6 else (
                "…" + text[max(0, common - 8):][: limit - 2] + "…")
    seen: dict[str, int] = {}
    for name in names:
        label = labels[name]
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:
            labels[name] = f"{label} [{seen[label]}]"
    return labels
