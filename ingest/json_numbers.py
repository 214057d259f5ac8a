"""Exact microseconds → integer nanoseconds, from the JSON number text itself.

Why the text: Kineto writes ``ts`` as absolute epoch microseconds with a
fractional part in ns (``1694128201545123.456``: 19 significant digits); a
float64 holds ~16, so any decoder that reads the number as a double is off
by up to ~128 ns, enough to change which slice nests in which. Reading the
digits keeps every value exact.

Rule (both decoders, this module and the compiled one in ``_kineto_scan.c``,
apply it): the value in µs times 1000, rounded to the nearest integer, ties
to even. Kineto's own forms (integers, up to three decimals) need no
rounding; exponent forms (``1.5e3``) are handled the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal, InvalidOperation

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


class NotANumber(ValueError):
    """The raw JSON value is not a number (a string, object, array or boolean)."""


def _round_frac(frac: bytes, whole: int, negative: bool) -> int:
    """ns from whole µs and fraction digits (no exponent), half to even."""
    head = frac[:3]
    ns = whole * 1000 + (int(head) * 10 ** (3 - len(head)) if head else 0)
    rest = frac[3:].rstrip(b"0")
    if rest:
        first = rest[:1]
        if first > b"5" or (first == b"5" and (len(rest) > 1 or ns % 2 == 1)):
            ns += 1
    return -ns if negative else ns


#: Beyond this many decimal digits a value cannot fit int64 ns: answer without
#: building the integer (``1e999999999`` must not cost a billion-digit int).
_MAX_DIGITS = 40


def _exponent_form_to_ns(raw: bytes) -> int:
    """``1.694128201545123456E+15`` → ns by integer arithmetic, half to even.

    Not ``Decimal.scaleb``: that rounds to the context's 28 digits first.
    """
    try:
        sign, digits, exponent = Decimal(raw.decode("ascii")).as_tuple()
    except (InvalidOperation, ValueError) as exc:  # pragma: no cover - JSON-checked
        raise NotANumber(raw.decode("ascii", "replace")) from exc
    assert isinstance(exponent, int)
    mantissa = int("".join(map(str, digits))) if digits else 0
    shift = exponent + 3  # ns = mantissa * 10**shift
    if mantissa == 0:
        return 0
    if shift >= 0:
        if len(str(mantissa)) + shift > _MAX_DIGITS:
            return -(2**64) if sign else 2**64  # out of int64: the caller reports it
        ns = mantissa * 10**shift
    elif -shift > len(digits) + 1:
        ns = 0  # below half a nanosecond
    else:
        ns, rest = divmod(mantissa, 10**-shift)
        half = 10**-shift
        if 2 * rest > half or (2 * rest == half and ns % 2 == 1):
            ns += 1
    return -ns if sign else ns


def json_number_to_ns(raw: bytes) -> int | None:
    """The ns of a JSON value holding µs; ``None`` for ``null``.

    ``raw`` is a complete, syntactically valid JSON value (msgspec has
    checked it). Raises :class:`NotANumber` for any other kind of value.
    """
    if raw == b"null":
        return None
    first = raw[:1]
    if first not in b"-0123456789" or not first:
        raise NotANumber(raw[:20].decode("utf-8", "replace"))
    if b"e" in raw or b"E" in raw:
        return _exponent_form_to_ns(raw)
    negative = first == b"-"
    body = raw[1:] if negative else raw
    whole, dot, frac = body.partition(b".")
    if not dot:
        ns = int(whole) * 1000
        return -ns if negative else ns
    return _round_frac(frac, int(whole), negative)


def raws_to_ns(raws: Iterable[object], base_ns: int) -> tuple[list[int | None], bool]:
    """Every raw value (``msgspec.Raw`` or bytes) in ns plus ``base_ns``; second item:
    whether any was null or absent (empty).

    The loop inlines the two forms Kineto writes (an integer, or three
    decimals) and leaves everything else to :func:`json_number_to_ns`.
    """
    out: list[int | None] = []
    append = out.append
    has_null = False
    for raw in raws:
        text = bytes(raw)
        whole, dot, frac = text.partition(b".")
        try:
            if not dot:
                append(int(text) * 1000 + base_ns)
                continue
            if len(frac) == 3 and text[0] != 45:  # not "-": whole + frac is the value
                append(int(whole) * 1000 + int(frac) + base_ns)
                continue
        except ValueError:
            pass
        if not text or text == b"null":
            has_null = True
            append(None)
            continue
        ns = json_number_to_ns(text)
        append(None if ns is None else ns + base_ns)
    return out, has_null
