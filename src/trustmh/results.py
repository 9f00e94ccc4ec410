"""The results.json schema (pydantic), so its JSON Schema can be published and checked."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class MetricValue(BaseModel):
    value: float | None = Field(description="null when undefined (e.g. Pearson r of a constant)")
    ci: tuple[float, float] | None = Field(None, description="bootstrap 95% interval")
    n: int | None = None


class TaskResult(BaseModel):
    task: str
    pillar: str
    status: str = Field(description="'ok' or 'not run'")
    reason: str | None = Field(None, description="why the task did not run, or why its value is null")
    metric: str
    value: float | None = None
    ci: tuple[float, float] | None = None
    ci_level: float = 0.95
    higher_is_better: bool
    trust_score: float | None = Field(None, description="0-100, higher is more trustworthy")
    n: int = Field(0, description="samples scored on the primary metric")
    n_samples: int = 0
    n_unscored: int = 0
    unscored_reasons: dict[str, int] = {}
    unscored_by_value: dict[str, dict[str, int]] = {}
    n_errors: int = 0
    error_kinds: dict[str, int] = {}
    n_judge_errors: int = 0
    judge_error_kinds: dict[str, int] = {}
    metrics: dict[str, MetricValue] = {}


class PillarResult(BaseModel):
    pillar: str
    trust_score: float | None
    tasks: list[str]


class ModelResults(BaseModel):
    model: str
    tasks: dict[str, TaskResult]
    pillars: dict[str, PillarResult]
    trust_score: float | None = Field(None, description="mean of the pillar trust scores")


class RunResults(BaseModel):
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


def json_schema() -> dict[str, Any]:
    return RunResults.model_json_schema()
