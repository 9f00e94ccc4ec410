"""The judge options `run` and `score` share: --judge (repeatable: a judge panel), --judge-base-url and
--min-judge-alpha (engine/judges.py holds what a panel is)."""

from __future__ import annotations

from ..agreement import ALPHA_MIN
from ..errors import UserError

JUDGE_HELP = ("Judge: a model spec, or rules (offline heuristics; judge-rated metrics then stay unscored); repeat for a "
              "judge panel (every judgement asked of every judge; scores averaged, labels by strict majority, "
              "Krippendorff's alpha per value). A judge may name its server: openai/NAME@URL.")
JUDGE_URL_HELP = "Base URL for the judge: once for every judge, or once per --judge, paired in order."
MIN_ALPHA_HELP = (f"A judge panel whose judges agree below this Krippendorff's alpha on a task is marked there "
                  f"(results.json low_agreement, the summary and the report). Default {ALPHA_MIN}, Krippendorff's "
                  f"lowest level for tentative conclusions.")


def judge_list(judges: list[str], urls: list[str]) -> list[tuple[str, str | None]]:
    """(spec, base URL) of each --judge, with its own URL (SPEC@URL, or a --judge-base-url paired with it),
    else the one shared --judge-base-url, else what the environment names for its provider."""
    from ..models import resolve_base_url, split_spec
    from .run_cmds import _model_urls
    specs, own, shared = _model_urls(judges, urls, flag="--judge", url_flag="--judge-base-url")
    out = []
    for j in specs:
        if j == "rules":
            out.append((j, None))
            continue
        split_spec(j)
        out.append((j, resolve_base_url(j, own.get(j) or shared)))
    return out


def set_min_alpha(spec, value: float | None) -> None:
    """--min-judge-alpha, recorded only when it is not the default (runs without it keep their id)."""
    import math
    if value is None:
        return
    if not (math.isfinite(value) and -1 <= value <= 1):
        raise UserError(f"--min-judge-alpha must be a number from -1 to 1, not {value}")
    if value == ALPHA_MIN:
        spec.options.pop("min_judge_alpha", None)
    else:
        spec.options["min_judge_alpha"] = value


def called_judges(spec) -> list[str]:
    """Every judge a run may call (the panel's, the proxy), for --max-cost's price check."""
    from ..engine.judges import llm_judges
    return [*(j for j, _ in llm_judges(spec)), spec.options.get("proxy_judge", "")]
