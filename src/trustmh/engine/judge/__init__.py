"""The judge stage: the run's judges by role (an LLM judge or a panel, the paper's proxy, the refusal
classifier, the rules; judges/roles.py's registry), each judge endpoint's pool of workers taking the models'
judgements in turn, a panel's verdicts combined into one score, and a rubric walked question by question.
What a judgement is (a rubric, its parsers) is trustmh.judges'."""

from __future__ import annotations

from ._roles import Judges, identified_judges, judge_backends, judge_ids, llm_judges, panel_endpoints, set_judges
from ._pool import JudgeJob, JudgePool, Pending
from ._panel import PanelTally, judge_parts, merged_verdicts, panel_score
from ._walk import judge_chain

__all__ = ["Judges", "judge_backends", "identified_judges", "judge_ids", "llm_judges", "panel_endpoints", "set_judges", "JudgeJob", "JudgePool", "Pending",
           "PanelTally", "judge_parts", "merged_verdicts", "panel_score", "judge_chain"]
