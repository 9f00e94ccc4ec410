"""The judge options `run` and `score` share: --judge (repeatable: a judge panel), --judge-base-url and
--min-judge-alpha (engine/judge/_roles.py holds what a panel is); and how a spec list pairs with its base URLs,
for --model and --judge alike."""

from __future__ import annotations

from ..scoring import ALPHA_MIN
from ..errors import UserError

JUDGE_HELP = ("Judge: a model spec, or rules (offline heuristics; judge-rated metrics then stay unscored); repeat for a "
              "judge panel (every judgement asked of every judge; scores averaged, labels by strict majority, "
              "Krippendorff's alpha per value). A judge may name its server: openai/NAME@URL.")
JUDGE_URL_HELP = "Base URL for the judge: once for every judge, or once per --judge, paired in order."
MIN_ALPHA_HELP = (f"A judge panel whose judges agree below this Krippendorff's alpha on a task is marked there "
                  f"(results.json low_agreement, the summary and the report). Default {ALPHA_MIN}, Krippendorff's "
                  f"lowest level for tentative conclusions.")


def _model_urls(models: list[str], base_urls: list[str], *, flag: str = "--model",
                url_flag: str = "--base-url") -> tuple[list[str], dict[str, str], str | None]:
    """Model specs, each model's own base URL (`spec@http...`, or the --base-url paired with it when
    there is one per --model) and the URL shared by the others (a single --base-url); the same for judges."""
    what = flag.removeprefix("--")
    import re
    specs, own = [], {}
    for m in models:
        # Only '@' before a URL splits: a model name may hold one (Vertex's claude-3-5-sonnet@20240620).
        found = re.fullmatch(r"(.+?)@([A-Za-z][A-Za-z0-9+.-]*://.*)", m)
        spec, url = (found.group(1), found.group(2)) if found else (m, None)
        if spec in specs:
            raise UserError(f"{flag} {spec} is given twice; a run names each {what} once")
        specs.append(spec)
        if url:
            own[spec] = url
    if len(base_urls) > 1:
        if len(base_urls) != len(specs):
            raise UserError(f"{len(base_urls)} {url_flag} for {len(specs)} {flag}: give one for every {what}, "
                            f"paired in order, or a single one for all")
        for spec, url in zip(specs, base_urls):
            own.setdefault(spec, url)
        return specs, own, None
    return specs, own, base_urls[0] if base_urls else None


def judge_list(judges: list[str], urls: list[str]) -> list[tuple[str, str | None]]:
    """(spec, base URL) of each --judge, with its own URL (SPEC@URL, or a --judge-base-url paired with it),
    else the one shared --judge-base-url, else what the environment names for its provider."""
    from ..models import resolve_base_url, split_spec
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
    spec.min_judge_alpha = value


def called_judges(spec) -> list[str]:
    """Every judge a run may call (the panel's, the proxy), for --max-cost's price check."""
    from ..engine.judge import llm_judges
    return [*(j for j, _ in llm_judges(spec)), spec.proxy_judge or ""]
