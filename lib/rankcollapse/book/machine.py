"""The processor this runs on, as the kernel variants see it (:mod:`rankcollapse.book.kernels`): its vendor,
the mix of :data:`~rankcollapse.book.kernels.MIXES` it already computes with natively, and so the variant
``bash make.sh test``'s second pass should take to be another machine and not a copy of the first pass.

Runner-side: no chapter imports it, so it is outside every chapter's code key (``kernels.py`` is inside
them, through the notebook, which is why this lives here)."""

from __future__ import annotations

from . import kernels


def cpu_vendor(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The processor's vendor string (``AuthenticAMD``, ``GenuineIntel``), "" where it cannot be read."""
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def native_mix(vendor: str) -> str | None:
    """The mix this processor computes with natively, if any: ``zen4`` on an AMD processor, where MKL takes
    its AVX2 path by vendor (measured on an AVX-512 AMD EPYC: ``zen4`` trains bit-identically to
    ``native``, ``tests/test_kernels.py``); None elsewhere."""
    return "zen4" if vendor == "AuthenticAMD" else None


def second_pass(cpu_capability: str, draw: int, vendor: str = "") -> str:
    """:func:`rankcollapse.book.kernels.second_pass`, leaving out the mix the processor already is
    (:func:`native_mix` of ``vendor``): on an AVX-512 AMD processor the draw is among the other mixes."""
    mixes = [m for m in kernels.MIXES if m != native_mix(vendor)]
    v = kernels.second_pass(cpu_capability, draw)
    return v if v not in kernels.MIXES or v in mixes else mixes[draw % len(mixes)]
