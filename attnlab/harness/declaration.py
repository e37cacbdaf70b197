"""How a study declares itself: its outputs, their columns and the rule each is compared by.

Every study folder of ``attnlab/studies`` has a ``study.py`` whose ``STUDY`` is a
:class:`Study`; the registry (``attnlab.studies``) finds them, and the report, the figures,
``make verify``, the Makefile's rules (``studies.mk``, generated) and every "run ... to
make it" message read them. Nothing here imports JAX or pandas.

A result CSV is an :class:`Output`: the script that writes it and its columns in the
order the CSV has them, each with the rule ``make verify`` compares it by (the rules are
stated in ``attnlab.verify``):

* :data:`KEY`: identifies a row; rows are matched by their key columns.
* ``mean(se)``: a Monte-Carlo mean whose standard error is column ``se`` (itself
  declared :data:`SE`; ``mean_with_se`` declares the pair).
* :data:`EXACT`: equal values. ``close(atol, rtol)``: ``|a - b| <= atol + rtol |b|``.
* :data:`SEED_RANGE`: per-seed training results, compared with the committed seeds'
  widened range (``seed_range(floor, atol)``: with a floor and an absolute width of its
  own); :data:`CHAOTIC`: the same, "never" (NaN) left out.
* :data:`UNCHECKED`: trial counts and columns derived from checked ones.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from attnlab.claims import Claim
    from attnlab.harness.tables import Tables

#: The heading of the report's second part, before the first study that names it.
BEYOND = "## Beyond the statics: boundaries and the companion article (experiments 06-08)"


@dataclass(frozen=True)
class Rule:
    """How ``make verify`` compares one column (build with the constants and helpers below)."""

    kind: str
    se: str | None = None  # a mean's standard-error column
    atol: float = 0.0
    rtol: float = 0.0
    floor: float | None = None  # seed_range: the floor where not the output's spread_floor


KEY, SE, EXACT, SEED_RANGE, CHAOTIC, UNCHECKED = (
    Rule(kind) for kind in ("key", "se", "exact", "seed_range", "chaotic", "unchecked")
)


def mean(se: str) -> Rule:
    """A Monte-Carlo mean whose standard error is column ``se``."""
    return Rule("mean", se=se)


def mean_with_se(column: str, se: str) -> dict[str, Rule]:
    """The two columns of one Monte-Carlo estimate: ``{column: mean(se), se: SE}``."""
    return {column: mean(se), se: SE}


def seed_range(floor: float | None = None, atol: float = 0.0) -> Rule:
    """Per-seed training results whose range is widened to at least ``floor`` times the
    committed median (None: the output's ``spread_floor``) and at least ``atol``."""
    return Rule("seed_range", atol=atol, floor=floor)


def close(atol: float, rtol: float) -> Rule:
    """A deterministic but rounding-sensitive value: ``|a - b| <= atol + rtol |b|``."""
    return Rule("close", atol=atol, rtol=rtol)


@dataclass(frozen=True)
class CsvSpec:
    """The rules of one CSV grouped by kind, as ``attnlab.verify.compare`` applies them."""

    out_flag: str  # "--out" (this CSV's path) or "--out-dir" (the directory)
    keys: tuple[str, ...]
    se: tuple[tuple[str, str], ...] = ()
    exact: tuple[str, ...] = ()
    close: tuple[tuple[str, float, float], ...] = ()  # (column, atol, rtol)
    seed_range: tuple[str, ...] = ()
    unchecked: tuple[str, ...] = ()
    curve_step: str | None = None  # per-step CSV: summarise each seed by its mean over steps
    spread_floor: float = 0.0
    widths: tuple[tuple[str, float, float], ...] = ()  # (column, floor, atol) overriding it
    chaotic: tuple[str, ...] = ()  # seed_range columns whose NaN ("never") is left out
    quick_flags: tuple[str, ...] | None = None  # None: not part of --quick

    def columns(self) -> list[str]:
        paired = [c for pair in self.se for c in pair]
        return [*self.keys, *paired, *self.exact, *(c for c, _, _ in self.close),
                *self.seed_range, *self.unchecked]  # fmt: skip


@dataclass(frozen=True)
class Output:
    """One result CSV: the script (under ``experiments/``) that writes it and, unless
    ``make verify`` leaves it alone (timings, the cards), its columns in CSV order, each
    with its rule.

    Attributes:
      script: the file name of the script.
      columns: column -> :class:`Rule`, in the order the CSV has them; empty: not verified.
      out_flag: how ``make verify`` sends the CSV elsewhere: ``--out`` (its path) or
        ``--out-dir`` (the directory).
      curve_step: a per-step CSV's step column (each seed summarised by its mean over steps).
      spread_floor: the seed_range rule's floor (cells of one seed each); a column's own
        (``seed_range(floor, atol)``) replaces it.
      quick_flags: the script's flags under ``make verify-quick``; None: not part of it.
      prediction: for the prediction tables of a fit of the training demo, the fit's name
        (``"first fit"``): the recall study judges the article's training numbers on them.
      arguments: the script's flags for this output where they are not its study's
        ``arguments`` (one script run two ways: the card's language-model cards).
    """

    script: str
    columns: Mapping[str, Rule] = field(default_factory=dict)
    out_flag: str = "--out-dir"
    curve_step: str | None = None
    spread_floor: float = 0.0
    quick_flags: tuple[str, ...] | None = None
    prediction: str = ""
    arguments: str = ""

    def __post_init__(self) -> None:
        means = [rule.se for rule in self.columns.values() if rule.kind == "mean"]
        errors = [name for name, rule in self.columns.items() if rule.kind == "se"]
        if sorted(means) != sorted(errors):  # type: ignore[type-var]
            raise ValueError(f"{self.script}: SE columns {errors} but means of {means}")

    @property
    def column_names(self) -> list[str]:
        """The CSV's columns, in order."""
        return list(self.columns)

    @property
    def verified(self) -> bool:
        return bool(self.columns)

    def _named(self, *kinds: str) -> tuple[str, ...]:
        return tuple(name for name, rule in self.columns.items() if rule.kind in kinds)

    def spec(self) -> CsvSpec:
        """The rules grouped by kind (what ``make verify`` applies)."""
        return CsvSpec(
            self.out_flag,
            self._named("key"),
            se=tuple((n, r.se) for n, r in self.columns.items() if r.kind == "mean" and r.se),
            exact=self._named("exact"),
            close=tuple((n, r.atol, r.rtol) for n, r in self.columns.items() if r.kind == "close"),
            seed_range=self._named("seed_range", "chaotic"),
            unchecked=self._named("unchecked"),
            curve_step=self.curve_step,
            spread_floor=self.spread_floor,
            widths=tuple(
                (n, self.spread_floor if r.floor is None else r.floor, r.atol)
                for n, r in self.columns.items()
                if r.kind == "seed_range" and (r.floor is not None or r.atol)
            ),
            chaotic=self._named("chaotic"),
            quick_flags=self.quick_flags,
        )


@dataclass(frozen=True)
class Study:
    """One study: its folder, outputs, figures and place in the report.

    Attributes:
      name: the folder under ``attnlab/studies``.
      position: its place in the report and in every listing (ascending).
      outputs: each result CSV it writes (under ``results/``, with a JSON sidecar).
      figures: figure names; each is a function of ``figure.py`` and a PNG + PDF.
      reads: the studies whose CSVs its figures also draw (Figure 3 draws 09's fit).
      claims: the article's claims it judges (``attnlab.claims`` types), if any; the check
        functions of its claims are ``report.CHECKS``.
      in_report: whether ``report.py`` has a ``section(tables)``.
      part: a heading the report puts before the first study of a group, if any.
      timing: True for results that are timings (never regenerated by ``make all`` or
        compared by ``make verify``).
      arguments: the script's flags beyond those every script takes, where it needs
        some to make its committed outputs (the card: which mechanisms).
      made_elsewhere: CSVs its report reads that ``make all`` never makes (nor ``make
        verify`` compares), each with the command that does (a model to install first:
        13's Gemma 3 tables, ``make gemma``).
    """

    name: str
    position: int
    outputs: Mapping[str, Output]
    figures: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()
    claims: tuple[Claim, ...] = ()
    in_report: bool = True
    part: str | None = None
    timing: bool = False
    arguments: str = ""
    made_elsewhere: Mapping[str, str] = field(default_factory=dict)

    @property
    def package(self) -> str:
        return f"attnlab.studies.{self.name}"

    @property
    def csvs(self) -> tuple[str, ...]:
        return tuple(self.outputs)

    @property
    def scripts(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(output.script for output in self.outputs.values()))

    def csvs_of(self, script: str, arguments: str | None = None) -> list[str]:
        """The CSVs ``script`` writes (run with ``arguments``, if given), in declaration
        order."""
        return [
            csv
            for csv, output in self.outputs.items()
            if output.script == script and arguments in (None, self.arguments_of(csv))
        ]

    def arguments_of(self, csv: str) -> str:
        """The flags the script that writes ``csv`` runs with (beyond every script's)."""
        return self.outputs[csv].arguments or self.arguments

    @property
    def runs(self) -> tuple[tuple[str, str], ...]:
        """Each distinct run of a script that makes outputs: ``(script, arguments)``."""
        return tuple(
            dict.fromkeys((output.script, self.arguments_of(csv)) for csv, output in
                          self.outputs.items())
        )  # fmt: skip

    @property
    def verified(self) -> bool:
        """Whether ``make verify`` regenerates and compares its outputs."""
        return not self.timing and all(output.verified for output in self.outputs.values())

    def figure(self, name: str) -> Callable[[Tables, Path], list[Path]]:
        """The function that draws figure ``name`` (imports matplotlib on first use)."""
        return getattr(importlib.import_module(f"{self.package}.figure"), name)
