"""What the experiments' figures share: an interval over seeds is drawn only where there is one,
and the figure says which.

One seed gives a value, not a 95 % confidence interval: a zero-width error bar, or a title
saying "95 % CI", would claim a certainty that one seed does not give.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from controller.stats import Interval


def has_interval(interval: Interval | None) -> bool:
    """Whether ``interval`` is one: a mean over two seeds or more."""
    return interval is not None and interval.n >= 2


def spread_note(counts: Iterable[int]) -> str:
    """How a figure names the error bars of values over ``counts`` seeds each: ``"95 % CI
    over 3 seeds"`` (``"2-5 seeds"`` where the counts differ; values of one seed have no bar),
    or ``"one seed"`` where no value has an interval."""
    counts = [n for n in counts if n]
    most = max(counts, default=0)
    if most < 2:
        return "one seed"
    least = min(counts)
    if least == most:
        return f"95 % CI over {most} seeds"
    return f"95 % CI over {least}-{most} seeds" + (" (none for one)" if least < 2 else "")


def error_bars(ax, positions: Sequence, intervals: Sequence[Interval | None],
               horizontal: bool = False, **style):  # fmt: skip
    """Draw every interval of two or more seeds as an error bar around its mean at its position
    on ``ax`` (``horizontal``: along x, at y = position), nothing else (markers and bars are
    the caller's); values of one seed, or none, get no bar. Returns the errorbar container, or
    ``None`` where no value had an interval."""
    shown = [(p, i) for p, i in zip(positions, intervals, strict=True) if has_interval(i)]
    if not shown:
        return None
    where = [p for p, _ in shown]
    means = [i.mean for _, i in shown]
    spread = [[i.mean - i.low for _, i in shown], [i.high - i.mean for _, i in shown]]
    if horizontal:
        return ax.errorbar(means, where, xerr=spread, fmt="none", **style)
    return ax.errorbar(where, means, yerr=spread, fmt="none", **style)
