"""Chapter parameters: one declared schema per chapter, validated before any work.

Every chapter declares its parameters with :class:`Param` (type, allowed range
or choices, and a default per profile). The same schema is used by the runner
(``rcbook run``, before a kernel starts) and inside the notebook (so the raw
``jupytext | papermill`` route is checked too). Papermill silently injects any
name it is given; :func:`resolve` is what turns an unknown name into an error.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

PROFILES = ("smoke", "full", "paper")
DEVICES = ("auto", "cpu", "cuda")


# parameters that say how a chapter is run, not what it computes: never part of a cache key, and never
# compared with a record (results do not depend on the number of training processes: tests/test_runner.py
# trains one stage with 1 and 3 workers). The device is in the cache key but not compared: a run on another
# device is checked against the same record.
HOW_NOT_WHAT = ("output_dir", "workers")


class ParameterError(ValueError):
    """A chapter parameter is unknown, of the wrong type, or out of range."""


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # "int", "float", "bool", "str", "int_list", "float_list", "str_list"
    doc: str
    defaults: dict  # profile -> value; a single non-dict value applies to every profile
    low: float | None = None
    high: float | None = None
    choices: tuple | None = None
    optional: bool = False  # None allowed

    def default(self, profile: str) -> Any:
        d = self.defaults
        if isinstance(d, dict):
            return d[profile]
        return d

    def allowed(self) -> str:
        base = {
            "int": "an integer",
            "float": "a number",
            "bool": "True or False",
            "str": "a string",
            "int_list": "a list of integers",
            "float_list": "a list of numbers",
            "str_list": "a list of strings",
        }[self.kind]
        if self.choices is not None:
            base += " from " + ", ".join(map(repr, self.choices))
        if self.low is not None and self.high is not None:
            base += f" in [{self.low}, {self.high}]"
        elif self.low is not None:
            base += f" >= {self.low}"
        elif self.high is not None:
            base += f" <= {self.high}"
        if self.optional:
            base += " (or None)"
        return base

    # -- checking --------------------------------------------------------------------
    def coerce(self, value: Any) -> Any:
        """Return the value in its declared type, or raise :class:`ParameterError`."""
        if value is None:
            if self.optional:
                return None
            raise self._bad(value)
        if self.kind.endswith("_list"):
            if isinstance(value, str):  # papermill -p passes lists as text
                try:
                    value = ast.literal_eval(value)
                except (ValueError, SyntaxError):
                    raise self._bad(value) from None
            if isinstance(value, tuple):
                value = list(value)
            if not isinstance(value, list) or not value:
                raise self._bad(value)
            item = self.kind[: -len("_list")]
            return [self._scalar(v, item) for v in value]
        return self._scalar(value, self.kind)

    def _scalar(self, v: Any, kind: str) -> Any:
        ok = {
            "int": isinstance(v, int) and not isinstance(v, bool),
            "float": isinstance(v, (int, float)) and not isinstance(v, bool),
            "bool": isinstance(v, bool),
            "str": isinstance(v, str),
        }[kind]
        if not ok:
            raise self._bad(v)
        if kind == "float":
            v = float(v)
        if self.choices is not None and v not in self.choices:
            raise self._bad(v)
        if kind in ("int", "float"):
            if (self.low is not None and v < self.low) or (self.high is not None and v > self.high):
                raise self._bad(v)
        return v

    def _bad(self, v: Any) -> ParameterError:
        return ParameterError(
            f"parameter '{self.name}' = {v!r} ({type(v).__name__}) is not allowed: "
            f"it must be {self.allowed()}"
        )


def require_divisible(p, width: str, heads: str, why: str = "") -> None:
    """Refuse parameters ``width`` and ``heads`` of ``p`` when the heads do not divide the width (each head
    gets width / heads dimensions); ``why`` says what the split is for."""
    d, h = getattr(p, width), getattr(p, heads)
    if d % h:
        raise ParameterError(
            f"parameters '{width}' = {d} and '{heads}' = {h}: {width} must be divisible by {heads} "
            f"({why + '; ' if why else ''}{d} % {h} != 0)"
        )


def require_distinct(p, name: str, what: str = "value", why: str = "") -> None:
    """Refuse parameter ``name`` of ``p`` (a list) when two of its entries are the same as printed (floats
    with ``:g``), since values are recorded under their printed names; ``what`` names one entry."""
    v = getattr(p, name)
    tags = [f"{x:g}" if isinstance(x, float) else str(x) for x in v]
    if len(set(tags)) != len(tags):
        raise ParameterError(
            f"parameter '{name}' = {v!r} repeats a {what} (as printed, {tags})" + (f": {why}" if why else "")
        )


def common_params() -> list[Param]:
    """Parameters every chapter has."""
    return [
        Param(
            "profile",
            "str",
            "scale of the run: smoke (CI), full (the book), paper (the papers' sizes)",
            "full",
            choices=PROFILES,
        ),
        Param(
            "device",
            "str",
            "where tensors live; auto: the CPU at smoke and full, whose records were made on the CPU; "
            "a CUDA GPU at paper when there is one",
            "auto",
            choices=DEVICES,
        ),
        Param("seed", "int", "master random seed", 0, low=0, high=2**31 - 1),
        Param(
            "output_dir",
            "str",
            "folder for results.json and figures (None: ./_output/<chapter>-<profile>)",
            None,
            optional=True,
        ),
    ]


@dataclass
class Schema:
    chapter: str
    params: list[Param] = field(default_factory=list)

    def __post_init__(self):
        names = [p.name for p in common_params()] + [p.name for p in self.params]
        if len(names) != len(set(names)):
            raise ValueError(f"duplicate parameter names in chapter {self.chapter}")
        self.all = {p.name: p for p in common_params() + self.params}

    def names(self) -> list[str]:
        return list(self.all)

    def resolve(self, given: dict, profile: str | None = None) -> dict:
        """Validate ``given`` (name -> value; ``None`` means "the profile's default") and fill defaults.

        Raises :class:`ParameterError` naming the first bad parameter and what is allowed.
        """
        unknown = sorted(set(given) - set(self.all))
        if unknown:
            raise ParameterError(
                f"unknown parameter(s) {', '.join(map(repr, unknown))} for chapter '{self.chapter}'; "
                f"valid names: {', '.join(self.names())}"
            )
        prof = given.get("profile") if given.get("profile") is not None else (profile or "full")
        prof = self.all["profile"].coerce(prof)
        out = {}
        for name, p in self.all.items():
            v = given.get(name)
            if name == "profile":
                out[name] = prof
            elif v is None:
                out[name] = p.coerce(p.default(prof)) if p.default(prof) is not None else None
            else:
                out[name] = p.coerce(v)
        return out

    def table(self) -> list[dict]:
        """One row per parameter with its defaults per profile (for ``rcbook list``)."""
        return [
            {
                "name": p.name,
                "kind": p.kind,
                "allowed": p.allowed(),
                "doc": p.doc,
                **{prof: p.default(prof) for prof in PROFILES},
            }
            for p in self.all.values()
        ]


def parse_cli_value(text: str) -> Any:
    """Parse a ``-p NAME VALUE`` string like papermill does (int, float, bool, None, list, else str)."""
    if text in ("True", "true"):
        return True
    if text in ("False", "false"):
        return False
    if text in ("None", "none", "null"):
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


# -- the parameters cell of a chapter, generated from its schema ------------------------------------------
TYPE_NAMES = {
    "int": "int",
    "float": "float",
    "bool": "bool",
    "str": "str",
    "int_list": "list[int]",
    "float_list": "list[float]",
    "str_list": "list[str]",
}
CELL_WIDTH = 109
CELL_HEAD = [
    "# The full profile's values; `rcbook list {chapter}` shows every profile's. Run with another profile",
    "# (papermill -p profile smoke), a name not given takes that profile's value. Generated from the",
    "# chapter's schema, where each parameter is described once: `rcbook cell {chapter} --write`.",
]


def _wrap(words: list[str], first: int, rest: int) -> list[str]:
    lines, cur, width = [], "", first
    for w in words:
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur, width = w, rest
        else:
            cur = f"{cur} {w}" if cur else w
    return lines + ([cur] if cur else [])


def parameters_cell(schema: Schema) -> str:
    """The source of a chapter's parameters cell: every parameter with its type and its full-profile value,
    described by its schema text (``name: type = value  # doc``, the doc continued on ``#`` lines when long).
    ``papermill --help-notebook`` reads the names, types, values and the first line of each doc."""
    out = [line.format(chapter=schema.chapter) for line in CELL_HEAD]
    for p in schema.all.values():
        # an optional one as the string "Optional[...]": evaluated it would need an import, and papermill's
        # reader of the cell does not take "str | None"
        kind = f'"Optional[{TYPE_NAMES[p.kind]}]"' if p.optional else TYPE_NAMES[p.kind]
        value = p.default("full")
        code = f"{p.name}: {kind} = {value!r}"
        if len(code) > CELL_WIDTH - 24 and isinstance(value, (list, tuple)) and value:
            # a long list, one item run per line; the doc follows its closing bracket (papermill reads the
            # value over the lines and the doc from the comment on its last line)
            items = _wrap([f"{v!r}," for v in value], CELL_WIDTH - 4, CELL_WIDTH - 4)
            out.append(f"{p.name}: {kind} = {'[' if isinstance(value, list) else '('}")
            out.extend(f"    {x}" for x in items)
            code = "]" if isinstance(value, list) else ")"
        first = CELL_WIDTH - len(code) - 4
        parts = _wrap(p.doc.split(), max(first, 20), CELL_WIDTH - 4)
        out.append(f"{code}  # {parts[0]}" if first >= 20 else code)
        rest = parts[1:] if first >= 20 else parts
        out.extend(f"#   {x}" for x in rest)
    return "\n".join(out)
