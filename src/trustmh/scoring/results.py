"""The results.json schema (pydantic), so its JSON Schema can be published and checked."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_serializer

# A count can never be negative; a results.json saying otherwise is damaged or crafted (a negative count
# would let a gate's --max-unscored pass a task with every sample left out).
Count = Annotated[int, Field(ge=0)]


class _Strict(BaseModel):
    # NaN and Infinity are not JSON, and a NaN compares false both ways: read into a gate, it passes every
    # threshold. A value that is undefined is null; anything else non-finite is refused when read.
    model_config = ConfigDict(allow_inf_nan=False)


def _without_none(keys: tuple[str, ...]):
    """A serializer that leaves out the named fields while they are None, so that a results.json without
    them is exactly what it was before they existed."""
    def serialize(self, handler):
        out = handler(self)
        if isinstance(out, dict):
            for k in keys:
                if out.get(k) is None:
                    out.pop(k, None)
        return out
    return model_serializer(mode="wrap")(serialize)


class CalibratedValue(_Strict):
    """A judged value anchored to human ratings (PPI++; `trustmh annotate`, then `trustmh score`)."""

    value: float | None = Field(None, description="the calibrated estimate; null with `reason` when there is none")
    ci: tuple[float, float] | None = Field(None, description="95% interval from the run's cluster bootstrap, "
                                                             "the judge's error included")
    n_human: Count = Field(0, description="items rated by humans (the rated rows the estimate rests on)")
    n_judge_only: Count = Field(0, description="items with the judge's value only")
    lam: float | None = Field(None, description="PPI++'s power-tuned lambda in [0, 1]: 0 human-only, 1 PPI")
    effective_n: float | None = Field(None, description="human ratings alone that would give the same variance "
                                                        "(about n / (1 - rho^2) for judge-human correlation rho)")
    human_only: float | None = Field(None, description="the rated items' own value (lambda = 0)")
    human_only_ci: tuple[float, float] | None = None
    method: str = Field("", description="'PPI++ (mean)', 'prediction-powered bootstrap', or the post-stratified "
                                          "mean of a draw stratified by the judge's verdict (no lambda)")
    design: str = Field("", description="how the rated items were drawn (uniform, stratified) and their weights")
    reason: str | None = Field(None, description="why there is no calibrated value")
    interval: str | None = Field(None, description="how the interval was made where it is not the cluster "
                                                   "bootstrap's percentiles: an exact bound (rated values that do "
                                                   "not vary), a bootstrap within strata, or over items and raters")
    n_raters: Count | None = Field(None, description="raters resampled with the items (two or more)")

    _serialize = _without_none(("interval", "n_raters"))


class MetricValue(_Strict):
    value: float | None = Field(description="null when undefined (e.g. Pearson r of a constant)")
    ci: tuple[float, float] | None = Field(None, description="bootstrap 95% interval")
    n: Count | None = None
    calibrated: CalibratedValue | None = Field(None, description="with human ratings of the run: this judged "
                                                                 "value anchored to them; absent otherwise")

    _serialize = _without_none(("calibrated",))


class JudgeValue(_Strict):
    value: float | None = Field(None, description="the task's primary metric from this judge's verdicts alone")
    n: Count = Field(0, description="samples this judge's verdicts gave a primary value")
    n_judge_failed: Count = 0
    judge_failed_reasons: dict[str, Count] = {}


class JudgeAgreement(_Strict):
    alpha: float | None = Field(None, description="Krippendorff's alpha of the judges on this per-sample value "
                                                  "(null when undefined: fewer than two values to pair)")
    ci: tuple[float, float] | None = Field(None, description="bootstrap 95% interval, resampling samples")
    level: str = Field("interval", description="level of measurement: nominal for labels (0/1 values the "
                                               "panel votes on), interval for scores (which it averages)")
    n: Count = Field(0, description="samples with usable verdicts from at least two judges")


class PanelResult(_Strict):
    judges: list[str] = Field(description="the panel's judges, in the order given")
    judge_values: dict[str, JudgeValue] = Field({}, description="each judge's own value of the task")
    agreement: dict[str, JudgeAgreement] = Field({}, description="per-sample value (the primary one and every "
                                                                 "value the judges give differently somewhere) "
                                                                 "-> inter-judge agreement")
    min_alpha: float = Field(description="agreement below this alpha marks the task (--min-judge-alpha)")
    low_agreement: list[str] = Field([], description="the values whose alpha is below min_alpha: the panel's "
                                                     "value there rests on judges that disagree")


class TaskResult(_Strict):
    task: str
    pillar: str
    title: str = ""
    description: str = Field("", description="what the primary metric measures")
    trust_range: tuple[float, float] | None = Field(None, description="metric values mapped to trust 0 and 100 "
                                                                      "(reversed when lower is better)")
    judgements: dict[str, dict[str, Any]] = Field({}, description="rubric name -> role, version and template "
                                                                  "source of every judgement the task made")
    primary_value: str = Field("", description="the per-sample value (samples.jsonl `values`) the primary "
                                               "metric is computed from")
    scoring_version: str = Field("", description="hash of the task's scoring code that produced these values")
    protocol: str = Field("trustmh", description="'paper' (the authors' method, templates from their files), "
                                                 "'trustmh', or why the paper's method was not followed")
    evidence: str = Field("E", description="how well the paper's method is known: A its code ... E nothing "
                                           "(PAPER_PROTOCOL.md)")
    templates: list[dict[str, str]] = Field([], description="every template read from the authors' files: "
                                                            "id, source (repo@commit:path#symbol), sha256")
    status: str = Field(description="'ok' or 'not run'")
    reason: str | None = Field(None, description="why the task did not run, or why its value is null")
    metric: str
    value: float | None = None
    ci: tuple[float, float] | None = None
    ci_level: float = 0.95
    higher_is_better: bool
    trust_score: float | None = Field(None, description="0-100, higher is more trustworthy")
    n: Count = Field(0, description="samples scored on the primary metric (the model's non-answers included: "
                                  "they count against it)")
    n_clusters: Count | None = Field(None, description="G: the clusters (items, attack intents, personas, "
                                                       "dialogues) the bootstrap resamples; below 5 no interval "
                                                       "(ci null: too few clusters), below 30 the interval is "
                                                       "widened by the t-correction (docs/scoring.md)")
    n_samples: Count = 0
    n_unscored: Count = Field(0, description="replies left out of the primary metric (judge failures, unusable "
                                           "items); n_samples - n - n_errors")
    unscored_reasons: dict[str, Count] = {}
    unscored_by_value: dict[str, dict[str, Count]] = {}
    n_errors: Count = 0
    error_kinds: dict[str, Count] = {}
    n_judge_errors: Count = 0
    judge_error_kinds: dict[str, Count] = {}
    n_no_answer: Count = Field(0, description="replies of the tested model with no usable answer (empty, refusal, "
                                           "unparsable, off-vocabulary, out of range): scored against the model, "
                                           "never left out")
    no_answer_reasons: dict[str, Count] = {}
    n_reasked: Count = Field(0, description="samples whose reply did not parse and that the paper's protocol asked "
                                          "again, as the original code does (privacy tiers 1 and 2: no rating; "
                                          "ESConv support: an empty reply); every "
                                          "reply, the first included, is in the store")
    n_judge_failed: Count = Field(0, description="samples whose judge verdict could not be used (judge API error, "
                                               "unusable judge output, no judge): left out of the judged values "
                                               "and never counted against the model")
    judge_failed_reasons: dict[str, Count] = {}
    n_judged: Count = Field(0, description="samples whose reply a judge model or classifier was asked about")
    judge_usable_rate: float | None = Field(None, description="share of the judged samples whose verdict could be "
                                                              "used as given (not a judge failure, not read by a "
                                                              "paper fall-back rule such as 'no digit = not "
                                                              "endorsing'); null when nothing was judged by a model")
    undefined_by_model: str | None = Field(None, description="why the primary metric is undefined by the model's own "
                                                             "replies (no answers, constant answers, one class "
                                                             "only): its trust score is then 0, the worst")
    n_stale_judgements: Count = Field(0, description="stored verdicts made with another version of their rubric, "
                                                   "left out unless scored with --accept-stored")
    base_metric: str | None = Field(None, description="for a relative measure (robustness drop, fairness gap): "
                                                      "the metric holding the base task's own value on the same "
                                                      "replies; a model that gives one reply to everything is "
                                                      "near perfect on the relative measure, not on this")
    base_value: float | None = None
    credit_cap: dict[str, Any] | None = Field(None, description="runs scored before trustmh's degenerate-behaviour "
                                                               "rule: what the pillars capped this row by (no "
                                                               "longer used)")
    degenerate_checks: list[dict[str, Any]] = Field([], description="the degenerate behaviours that would reach this "
                                                                   "row's best value without a useful answer, each "
                                                                   "with its statistic and threshold "
                                                                   "(tasks.base.DegenerateCheck)")
    counted: dict[str, Any] | None = Field(None, description="the construct the pillars count for this row when it "
                                                            "is not the row's own metric (tasks.base.Counted: "
                                                            "robustness as the score on perturbed inputs)")
    same_reply_share: float | None = Field(None, description="share of the items whose usual free-text reply "
                                                             "(the one given most often to its samples) is the "
                                                             "same text as most items' (exact text, case and "
                                                             "spacing aside; informative only: the rule reads "
                                                             "near_duplicate_share)")
    near_duplicate_share: float | None = Field(None, description="share of the compared free-text replies that are "
                                                                 "a near duplicate of a reply to another item: "
                                                                 "stock replies (scoring/degenerate.py; null: "
                                                                 "closed questions or fewer than two items)")
    reply_similarity: float | None = Field(None, description="mean similarity of the free-text replies to "
                                                             "different items (shingle containment, 0-1)")
    answering_share: float | None = Field(None, description="share of the compared free-text replies (those of "
                                                            "near_duplicate_share) that answer (not empty, not a "
                                                            "refusal, not a copy of the request)")
    credited_trust: float | None = Field(None, description="the trust this row counts in its pillar and the "
                                                           "overall score (trustmh's aggregation, `aggregation`): "
                                                           "trust_score, or the counted construct's trust "
                                                           "(`counted`), or 0 where a degenerate check flags the "
                                                           "model; null when a check's statistic is not measured")
    credit_note: str | None = Field(None, description="why credited_trust differs from trust_score, or null")
    partial: str | None = Field(None, description="why the value is not the task's protocol's full measurement "
                                                  "(a subset of its personas, runs or turns; the offline rules "
                                                  "judge), or null; `trustmh gate` fails such a value unless "
                                                  "--allow-partial")
    metrics: dict[str, MetricValue] = {}
    paper: dict[str, MetricValue] = Field({}, description="under --protocol paper: every quantity the original "
                                                          "code reports, under the name it reports it by "
                                                          "(e.g. per_class_metrics.self-harm.recall), with the "
                                                          "value, n and interval of the trustmh metric holding "
                                                          "it (docs/protocols.md)")
    n_judge_addressed: Count = Field(0, description="judged samples whose reply addresses the judge (a rubric-"
                                                  "format verdict, an instruction to an evaluator, the rubric's "
                                                  "score lines, a closing tag): flagged, still scored as judged")
    judge_addressed: list[dict[str, str]] = Field([], description="those samples: item id, variant and what "
                                                                  "was found (at most 50)")
    panel: PanelResult | None = Field(None, description="a judge panel's (several --judge): each judge's own "
                                                        "value and the judges' agreement; the task's value is the "
                                                        "panel's (mean of scores, strict majority of labels). "
                                                        "Absent with one judge")
    calibrated: CalibratedValue | None = Field(None, description="with human ratings of the run: the primary "
                                                                 "value anchored to them (PPI++); absent otherwise")

    # A run with one judge and no ratings writes exactly the results.json it wrote before panels existed.
    _serialize = _without_none(("panel", "calibrated", "partial"))
    # The bootstrap draws of the primary (and counted) metric, metric name -> array over resamples, set by
    # phase 2 and read by the pillars' intervals; never written (a results.json read back has none).
    _draws: dict[str, Any] = PrivateAttr(default_factory=dict)


class PillarResult(_Strict):
    pillar: str
    trust_score: float | None = Field(None, description="unweighted mean of the rows' credited trust (a row: the "
                                                        "mean of its tasks' credited_trust)")
    ci: tuple[float, float] | None = Field(None, description="approximate 95% interval (see `aggregation`)")
    tasks: list[str] = Field([], description="the pillar's tasks present in this run")
    rows: dict[str, dict[str, Any]] = Field({}, description="the paper's subtask rows: tasks, measured tasks, "
                                                            "trust score (the paper's metric: the rank table's), "
                                                            "credited (what the pillar counts), credited tasks "
                                                            "and why a task's credit is less")
    n_rows: Count = 0
    n_rows_measured: Count = 0
    partial: bool = Field(False, description="measured on fewer rows (or row tasks) than the paper has")
    n_samples: Count = 0


class ModelResults(_Strict):
    model: str
    tasks: dict[str, TaskResult]
    pillars: dict[str, PillarResult]
    trust_score: float | None = Field(None, description="mean of the measured pillar trust scores")
    trust_ci: tuple[float, float] | None = None
    n_pillars: Count = 8
    n_pillars_measured: Count = 0
    partial: bool = Field(False, description="fewer pillars measured than the paper has, or a partial pillar")
    beyond_paper: dict[str, float | None] = Field({}, description="trust scores of tasks outside the paper's "
                                                                  "structure; never part of a pillar")
    aggregation: str = ""
    identity: dict[str, Any] | None = Field(None, description="a local model's content fingerprint, files, chat "
                                                                "template and library versions (hf/ models); for "
                                                                "a GGUF file also `gguf`: its sha256, architecture, "
                                                                "file type (quantization) and tensor types")


class RoleCast(_Strict):
    """Who played one judging role of a run, beside the paper's model for it."""
    model: str = Field(description="the model spec that played it ('rules': trustmh's offline rules)")
    paper_model: str = Field(description="the paper's model for this role")
    is_paper: bool = Field(description="model is the paper's")


class RunResults(_Strict):
    schema_version: int = 1
    run_id: str
    created: str
    spec: dict[str, Any]
    data: dict[str, Any] = Field(description="data source and sha256 of every file used")
    versions: dict[str, str]
    bootstrap: dict[str, Any]
    models: dict[str, ModelResults]
    outputs: dict[str, str] = Field({}, description="sha256 of samples.jsonl written with these results: "
                                                    "readers check it to detect a pair torn by an interrupted write")
    notes: list[str] = Field([], description="what a reader must know to interpret these numbers, e.g. run "
                                             "settings a provider did not accept")
    calibration: dict[str, Any] | None = Field(None, description="the human ratings the calibrated values rest on: "
                                                                 "file, design, items drawn and rated, raters")
    roles: dict[str, RoleCast] = Field({}, description="judge (and proxy_judge, privacy.leakage's third party, under the "
                                                       "paper's protocol): the model that played it and whether it "
                                                       "is the paper's")
    banner: str | None = Field(None, description="shown above these results wherever they are shown; set on runs "
                                                 "of the built-in sample suite, whose numbers are not a benchmark")

    _serialize = _without_none(("calibration",))


def json_schema() -> dict[str, Any]:
    return RunResults.model_json_schema()
