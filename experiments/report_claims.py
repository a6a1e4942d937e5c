"""The report's checks of a claim at one setting (:class:`Claim`, each baseline a
:class:`Comparison`) and the bound checks: BSSI's and Beamer's orders against brute force on
instances where the order matters, against the proven bounds (Sincronia's 4, Beamer's 20/3)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from controller.stats import Interval
from experiments.verdicts import Decision, decide


@dataclass
class Comparison:
    """The claimed policy against one baseline: a paired :class:`Decision` over seeds, or a
    proven bound checked over instances (``ratio`` spans them: low the best, high the worst;
    one instance above ``bound`` disproves it)."""

    baseline: str
    ratio: Interval | None
    bound: float | None = None
    decision: Decision | None = None

    @property
    def verdict(self) -> str:
        """Reproduced / opposite (a bound: held / broken), else the decision's verdict."""
        if self.bound is not None and self.ratio is not None:
            return "reproduced" if self.ratio.high <= self.bound else "opposite"
        if self.decision is not None:
            return self.decision.verdict.value
        return "not measured"


@dataclass
class Claim:
    """A claim checked at one setting (the bounds, the testbed): its comparisons."""

    name: str
    paper: str
    statement: str
    setting: str
    metric: str
    comparisons: list[Comparison] = field(default_factory=list)
    note: str = ""
    # measured in the same setting to explain the verdict, not part of it
    context: list[tuple[str, Interval | None]] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        """The comparisons' verdict if they agree, else each baseline's."""
        verdicts = {c.verdict for c in self.comparisons}
        if len(verdicts) == 1:
            return verdicts.pop()
        return "; ".join(f"{c.verdict} vs {c.baseline}" for c in self.comparisons)


def paired_comparisons(
    values: dict[str, dict[int, float]], claimed: str, baselines, lower: bool = True
) -> list[Comparison]:
    """The claimed policy against each baseline, paired per seed, one Holm family."""
    families = {}
    for b in baselines:
        mine, theirs = values.get(claimed, {}), values.get(b, {})
        ratios = [mine[s] / theirs[s] for s in sorted(mine) if s in theirs
                  and mine[s] and theirs[s] and mine[s] > 0 and theirs[s] > 0]  # fmt: skip
        if ratios:
            families[b] = ratios
    decisions = decide(families, lower) if families else {}
    return [
        Comparison(b, decisions[b].ratio if b in decisions else None, decision=decisions.get(b))
        for b in baselines
    ]


SINCRONIA_BOUND = 4.0  # BSSI + greedy strict priority, zero release times (Sincronia)


BEAMER_BOUND = 20.0 / 3.0  # average SCT of Beamer's order (Beamer)


def spread(ratios: list[float]) -> Interval:
    """Ratios to the optimum over instances: their mean, best and worst."""
    return Interval(sum(ratios) / len(ratios), min(ratios), max(ratios), len(ratios))


def bssi_ratios() -> dict:
    """BSSI's order against the best of every order on small instances (a sweep point), with
    a uniformly random order's expected ratio and the worst order's beside it: on the random
    instances, and on instances where the order matters (:func:`reference.contended_coflows`),
    where an ordering no better than chance would fail the check."""
    from controller.policies import make_policy
    from simulator import reference

    rng = random.Random("report-bssi")
    out: dict[str, list[float]] = {
        key + suffix: [] for key in ("bssi", "random", "worst") for suffix in ("", "_contended")
    }

    def measure(state, suffix: str) -> None:
        best, values = reference.brute_force_best(state)
        ours = reference.order_value(state, make_policy("sincronia").schedule(state).order)
        out["bssi" + suffix].append(ours / best)
        out["random" + suffix].append(sum(values) / len(values) / best)
        out["worst" + suffix].append(max(values) / best)

    for weighted in (False, True):
        for n in range(2, reference.MAX_COFLOWS + 1):
            for _ in range(6):
                measure(reference.state_of(reference.random_coflows(rng, n, 4, weighted)), "")
    contended = random.Random("report-bssi-contended")
    for n in range(4, reference.MAX_COFLOWS + 1):
        for _ in range(8):
            measure(reference.state_of(reference.contended_coflows(contended, n)), "_contended")
    return out


def stage_ratios() -> dict:
    """Beamer's and Sincronia's orders against the best order's average SCT (a sweep point)."""
    from controller.policies import make_policy
    from simulator import reference

    rng = random.Random("report-beamer")
    out: dict[str, list[float]] = {key + suffix: [] for key in ("beamer", "sincronia", "random",
                                   "worst") for suffix in ("", "_contended")}  # fmt: skip

    def measure(state, suffix: str) -> None:
        values = reference.every_order_stage_completion_sums(state)
        best = min(values)
        for policy in ("beamer", "sincronia"):
            order = make_policy(policy).schedule(state).order
            out[policy + suffix].append(reference.stage_completion_sum(state, order) / best)
        out["random" + suffix].append(sum(values) / len(values) / best)
        out["worst" + suffix].append(max(values) / best)

    for n_stages in (2, 3, 4):
        for n_hosts in (3, 5):
            for _ in range(8):
                state = reference.stage_instance(rng, n_stages, max_jobs=2, n_hosts=n_hosts)
                if len(state.coflows) <= reference.MAX_COFLOWS:
                    measure(state, "")
    contended = random.Random("report-beamer-contended")
    for n_stages in (3, 4):
        for _ in range(12):
            state = reference.contended_stage_instance(contended, n_stages, max_jobs=2)
            if len(state.coflows) <= reference.MAX_COFLOWS:
                measure(state, "_contended")
    return out


def against_brute_force(results: dict[str, dict]) -> list[Claim]:
    """BSSI's and Beamer's orders against the best of every order on small instances."""
    from simulator import reference

    coflows, stages = results["bssi"], results["stages"]
    bssi = coflows["bssi"]
    beamer, sincronia = stages["beamer"], stages["sincronia"]
    n_contended = len(coflows["bssi_contended"])
    return [
        Claim(
            "BSSI (Sincronia)", "Agarwal et al., SIGCOMM 2018",
            "BSSI with greedy strict priority is within 4x of the optimal total weighted CCT "
            "(all coflows released at 0)",
            f"{len(bssi)} random instances of 2-{reference.MAX_COFLOWS} coflows of 1-3 flows on 4 "
            "hosts, half of them weighted; the optimum by trying every order",
            "total weighted CCT / the best order's: mean [best, worst] over the instances",
            [Comparison("brute force", spread(bssi), bound=SINCRONIA_BOUND),
             Comparison("brute force, contended instances", spread(coflows["bssi_contended"]),
                        bound=SINCRONIA_BOUND)],
            context=[
                ("a uniformly random order on the random instances", spread(coflows["random"])),
                ("the worst order on them", spread(coflows["worst"])),
                (f"BSSI on {n_contended} contended instances (4-{reference.MAX_COFLOWS} coflows "
                 "from one shared port, sizes over three orders of magnitude)",
                 spread(coflows["bssi_contended"])),
                ("a uniformly random order on the contended ones",
                 spread(coflows["random_contended"])),
                ("the worst order on them", spread(coflows["worst_contended"])),
            ],
        ),
        Claim(
            "Beamer vs brute force", "He et al., IEEE TNSM 19(2), 2022",
            "Beamer's order keeps the average SCT within 20/3 of optimal",
            f"{len(beamer)} random instances of 2-4 stages of 1-2 jobs (one in-flight coflow "
            f"each, at most {reference.MAX_COFLOWS}) on 3 or 5 hosts; the optimum by trying every "
            "order",
            "average SCT / the best order's: mean [best, worst] over the instances",
            [Comparison("brute force", spread(beamer), bound=BEAMER_BOUND),
             Comparison("brute force, contended instances", spread(stages["beamer_contended"]),
                        bound=BEAMER_BOUND)],
            context=[("Sincronia's order on the same instances, average SCT / the best order's",
                      spread(sincronia)),
                     ("a uniformly random order on them", spread(stages["random"])),
                     ("the worst order on them", spread(stages["worst"])),
                     (f"Beamer on {len(stages['beamer_contended'])} contended instances (3-4 "
                      "stages, every job on one shared port, stage sizes over three orders of "
                      "magnitude)", spread(stages["beamer_contended"])),
                     ("Sincronia on them", spread(stages["sincronia_contended"])),
                     ("a uniformly random order on them", spread(stages["random_contended"])),
                     ("the worst order on them", spread(stages["worst_contended"]))],
        ),
    ]  # fmt: skip


def run_optimum_point(point: dict) -> dict:
    """One part of the bound checks (a sweep point, see cli.sweep): BSSI's or Beamer's ratios."""
    return bssi_ratios() if point["part"] == "bssi" else stage_ratios()
