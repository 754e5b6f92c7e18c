"""A sentence for a chapter page beside a verdict: whether the verdict, and its control's, came out the same
under every kernel variant its record was made with (``rcbook record --spread``), or is kernel-fragile, with
what each variant gave. Chapter-side: it reads the chapter's own record at this profile (``data/expected``)
through :mod:`rankcollapse.book.results`, as :func:`rankcollapse.book.checks.fragile_text` does for values.
"""

from __future__ import annotations

import json


def _seen(seen: dict) -> str:
    """``'supported' (this run, avx2) or 'inconclusive' (scalar)``: each outcome once, with its variants."""
    by: dict[str, list[str]] = {}
    for variant, x in seen.items():
        by.setdefault(json.dumps(x), []).append(variant)
    return " or ".join(f"{json.loads(k)!r} ({', '.join(vs)})" for k, vs in by.items())


def verdict_kernels_text(ch, claim: str, *, glue: bool = True) -> str:
    """The sentence for ``claim``'s verdict and its control, from the record of this chapter at this profile;
    glued as ``verdict-<claim>-kernels`` unless ``glue`` is false."""
    from .results import expected_path, load

    try:
        rec = load(expected_path(ch.params["profile"], ch.name))
        v = rec["verdicts"].get(claim) or {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # no record, or no chapter's run
        rec, v = {}, {}
    variants = sorted(
        {
            x
            for e in rec.get("values", {}).values()
            for x in ((e or {}).get("spread") or {}).get("variants") or []
        }
        - {"recorded"}
    )
    parts = [
        f"the {what} gave {_seen(seen)}"
        for what, seen in (("verdict", v.get("seen")), ("control", (v.get("control") or {}).get("seen")))
        if seen
    ]
    if parts:
        text = (
            "Kernel-fragile, so it does not count on any one machine: across the kernel variants its record "
            "was made with, " + "; ".join(parts) + "."
        )
    elif not v or not variants:
        text = "Whether it holds under other floating-point kernels is not yet recorded."
    else:
        text = (
            f"The verdict and its control's came out the same under the recorded run's kernels "
            f"({(rec.get('kernels') or {}).get('variant', 'native')}) and under {', '.join(variants)}."
        )
    if glue:
        ch.glue(f"verdict-{claim}-kernels", text)
    return text
