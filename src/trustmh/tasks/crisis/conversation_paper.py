"""crisis.conversation under --protocol paper: VERA-MH as it is at commit f813d29 (SpringCare/VERA-MH,
staged with PROTOCOL.md in ../shared/data/external/vera-mh), so that its numbers compare with VERA-MH's.

Its words come from its files at run time, never from here: the persona prompt, personas, rubric and the
judge's preamble are data (`trustmh data pull vera-mh`), and what its code writes is read out of the code
without running it (`data/extract.py`, `trustmh data pull methods`): the person's first input
(conversation_simulator.py:70), the tested model's system prompt (generate_conversations/runner.py:43),
the judge's question (judge/llm_judge.py:387-394), the transcript's speaker labels (utils/
conversation_utils.py:53-56), the text an API error becomes (llm_clients/openai_llm.py:253) and the
default turns and runs (generate.py: -t 30, -r 5).

How it runs (PROTOCOL.md §1-3): the person speaks first; each side is sent its own system prompt and only
the other side's last message (no history); no sampling setting is sent to any role; every conversation
runs all its turns, even after the person says "Thank you, I'm done." (the stop signals are an empty set,
conversation_simulator.py:15); an API error becomes the message `Error generating response: ...` and the
conversation goes on. The judge gets the preamble with the transcript in its system prompt and one
stateless question a call, read by substring; the walk, the ratings and their defects are `PaperWalk`.

Defects kept, as VERA-MH has them (each changes numbers; trustmh's method fixes them):
1. no history: each side sees only the other's last message (openai_llm.py:163-168);
2. no stop rule: "Thank you, I'm done." never ends a conversation (conversation_simulator.py:15-56);
3. no sampling settings pinned for any role (openai_llm.py:147-152; llm_judge.py:267-271);
4. "Not Relevant" reads as "No" at Q8, Q10, Q11 ("no" is in "not relevant"; llm_judge.py:488-490);
5. a judge reply without "ANSWER:" is read as the first option, "Yes" on a yes/no question (:493);
6. the `Yelow` typo (rubric Q18, Q30) rates a Yes there Best Practice (:591-597);
7. on the not-imminent branch, No through Q20 falls into the imminent questions Q21-24 (:455-465);
8. Q4's "Not Relevant" option never triggers its all-Not-Relevant exit (compared with 'not relevant',
   :421): the walk stops there with Detects Risk rated Best Practice and the rest missing;
9. an API error becomes conversation text (openai_llm.py:240-253);
10. the judge reads the transcript as a text-mode file leaves it: save_conversation_to_file writes it with
    open(..., 'w') and LLMJudge.load_conversation reads it back with open(..., 'r') (conversation_utils.py:30,
    llm_judge.py:99), whose universal newlines turn a reply's CR LF and lone CR into LF (`read_back`);
11. score.py's "all Best Practice or Not Relevant" share never counts a conversation with a dimension the
    walk never reached (the empty cell reads back from results.csv as NaN, which equals neither rating nor
    '', score.py:262-267), and such a conversation counts as relevant (NaN != 'Not Relevant', :256-259);
12. calculate_vera_score rounds the pooled shares to 2 decimals before its formula, the per-dimension ones
    not, and every score after it (score_utils.py at 0959538).
Deviations: a judge API error (after trustmh's retries) is a judge failure, counted apart, never read as
the first option as VERA-MH's client would (an error is never a rating in trustmh); a share or score over no
rated conversation is no number (calculate_dimension_scores writes 0.0, the overall score 50); a reply
longer than MAX_MESSAGE_CHARS ends the conversation as an error of its sample (VERA-MH has no bound).

Scores (judge/score.py): per dimension the shares of each rating over conversations not rated Not
Relevant, a dimension a walk never reached counted in the denominator and in no rating (`p_*`); overall
shares pooled over every rated cell; by risk level with Not Relevant in the denominator (`r_*`); the
conversations with at least one HPH and with none below Best Practice. The VERA score, from the later
judge/score_utils.py (upstream commit 0959538), rounds each share to 2 decimals before its formula and the
score after it."""

from __future__ import annotations

import ast
import hashlib
from typing import Any

import numpy as np

from ...data import extract, transcripts
from ...data.methods import MethodError
from ...judges.rubric import Judged
from ...scoring.metrics import Means, Table, group_mask
from ...types import Chain, Item, Response, Sample, Score, Turn
from ..base import DataSource, MethodTemplate, Rubric, RunContext, Verdicts
from .conversation_common import (BP, DEFAULT_RUNS, DEFAULT_TURNS, HPH, MAX_MESSAGE_CHARS, NR, RISK_LEVELS, SUB,
                                  ConversationMethod,
                                  PaperWalk, conversation_options, conversation_record, drive_walk, dumps_walk,
                                  longest_walk, rules_reply, walk_chain)

VERA = "SpringCare+VERA-MH/"
SIMULATOR = VERA + "generate_conversations/conversation_simulator.py"
RUNNER = VERA + "generate_conversations/runner.py"
JUDGE = VERA + "judge/llm_judge.py"
TRANSCRIPT = VERA + "utils/conversation_utils.py"
CLIENT = VERA + "llm_clients/openai_llm.py"
CLI = VERA + "generate.py"

TEMPLATES = (
    MethodTemplate("V-start", SIMULATOR, "ConversationSimulator.start_conversation.current_message"),
    MethodTemplate("V-system", RUNNER, "ConversationRunner.__init__:get()"),
    MethodTemplate("V-judge", JUDGE, "LLMJudge._evaluate_question_flow.prompt"),
    MethodTemplate("V-transcript", TRANSCRIPT, "format_conversation_summary.prefix"),
    MethodTemplate("V-error", CLIENT, "OpenAILLM.generate_response:return[1]"),
    MethodTemplate("V-defaults", CLI, "argparse defaults"),
)
PAPER_RUBRIC = Rubric("flow", method=JUDGE)
_EXAMPLES_FIELD = "f'Examples/Context: {examples_text}' if examples_text else ''"


def cli_defaults(ctx: RunContext) -> tuple[int, int]:
    """VERA-MH's --turns and --runs defaults, read from its generate.py."""
    d = extract.argparse_defaults(CLI, ctx.methods_root)
    return d["turns"], d["runs"]


class ConversationPaper(ConversationMethod):
    exact_params = True  # VERA-MH sends no sampling setting: nothing is added (the providers' defaults)
    protocol_note = ("VERA-MH's method at commit f813d29, its defects kept: no history, no stop rule, no pinned "
                     "settings; 'Not Relevant' read as 'No', a reply without ANSWER: as the first option "
                     "(judge_fallback_share), the Yelow typo as Best Practice, the not-imminent questions falling "
                     "into the imminent ones, Q4's dead Not Relevant exit; API errors as conversation text; the "
                     "transcript read back in text mode (CR LF and CR as LF); score.py's all-Best-Practice share "
                     "never counting a conversation with a dimension never reached; the pooled shares rounded "
                     "before the VERA formula. Its judge/score.py shares beside (score_py_*).")

    def params(self, ctx: RunContext) -> dict[str, Any]:
        return {}

    def prepare(self, data: DataSource, ctx: RunContext) -> None:
        root = ctx.methods_root
        if (DEFAULT_TURNS, DEFAULT_RUNS) != cli_defaults(ctx):
            raise MethodError(f"{CLI}: its --turns/--runs defaults are not {DEFAULT_TURNS}/{DEFAULT_RUNS} any more")
        self.start = extract.local_string(SIMULATOR, root, "ConversationSimulator.start_conversation",
                                          "current_message").render({})
        key, default = extract.call_arguments(RUNNER, root, "ConversationRunner.__init__", "get")
        if key != "system_prompt" or not isinstance(default, str):
            raise MethodError(f"{RUNNER}: the provider's default system prompt is not where it was")
        self.system = default
        self.question = extract.local_string(JUDGE, root, "LLMJudge._evaluate_question_flow", "prompt", inline=False)
        if _EXAMPLES_FIELD not in self.question.fields:
            raise MethodError(f"{JUDGE}: the question's Examples line is not the expression it was")
        self.speakers = {"user": extract.local_string(TRANSCRIPT, root, "format_conversation_summary", "prefix", 0).render({}),
                       "chatbot": extract.local_string(TRANSCRIPT, root, "format_conversation_summary", "prefix", 1).render({})}
        self.error_text = extract.returned_string(CLIENT, root, "OpenAILLM.generate_response", 1)

    def opening(self, item: Item, ctx: RunContext) -> list[dict[str, str]]:
        return [{"role": "system", "content": item.input["prompt"]}, {"role": "user", "content": self.start}]

    # --- the conversation (conversation_simulator.py:58-118) ------------------------------------------------
    def conversation(self, sample: Sample, ctx: RunContext) -> Chain:
        turns_max, _ = conversation_options(ctx)
        persona, start, system = sample.item.input["prompt"], self.start, self.system

        def steps():
            turns: list[dict[str, Any]] = []
            current = start
            for n in range(turns_max):
                user = n % 2 == 0
                messages = [{"role": "system", "content": persona if user else system},
                            {"role": "user", "content": current}]
                resp = yield Turn("user" if user else "model", messages, f"{'user' if user else 'model'}#{n // 2 + 1}",
                                  {} if user else None)
                if resp.error_kind == "reply_too_large":  # VERA-MH has no bound: an error of the sample here
                    return Response(transcripts.dumps(transcripts.record(turns, "error")), error_kind=resp.error_kind,
                                    error=f"message {n + 1} ({'simulated person' if user else 'tested model'}): {resp.error}")
                turn = {"role": "user" if user else "chatbot", "text": resp.text or ""}
                if not resp.ok:  # VERA-MH's client returns its error as the message (defect 9)
                    turn = {"role": turn["role"], "text": self.error_text.render({"str(e)": resp.error or ""}),
                            "error": resp.error_kind}
                turns.append(turn)
                current = turn["text"]
            return Response(transcripts.dumps(transcripts.record(turns, "turns")), finish_reason="stop")

        user_calls, model_calls = (turns_max + 1) // 2, turns_max // 2
        prompt = len(persona) // 4
        return Chain(steps, f"vera-mh paper, {turns_max} messages",
                     {"user": (user_calls, user_calls * (prompt + 1024), user_calls * 1024),
                      "model": (model_calls, model_calls * 1024, model_calls * 1024)}, MAX_MESSAGE_CHARS)

    def transcript(self, rec: dict[str, Any]) -> str:
        """The text VERA-MH's judge reads: a replayed VERA-MH file as it is, else the transcript written as
        conversation_utils.format_conversation_summary writes it (our records never end on a signal)."""
        if isinstance(rec.get("vera_text"), str):
            return read_back(rec["vera_text"])
        return read_back("\n".join(f"{self.speakers[t['role']]} {t['text']}\n" for t in rec["turns"]))

    # --- the judge (llm_judge.py:253-271, 380-394) ---------------------------------------------------------
    def active_rubrics(self, ctx: RunContext) -> tuple[Rubric, ...]:
        return (PAPER_RUBRIC,)

    def judge_params(self, rubric: Rubric, ctx: RunContext) -> dict[str, Any]:
        return {}  # llm_judge.py:267-271 passes no setting

    def walker(self) -> PaperWalk:
        return PaperWalk(self.flow)

    def judge_messages_for(self, conversation: str):
        system = read_back(self.preamble).format(conversation=conversation)  # read in text mode (llm_judge.py:74)

        def ask(q) -> list[dict[str, str]]:
            values = {"question_text": q.text, "options_str": ", ".join(q.option_texts),
                      _EXAMPLES_FIELD: _examples_line(q.examples)}
            return [{"role": "system", "content": system}, {"role": "user", "content": self.question.render(values)}]
        return ask

    def judgements(self, sample: Sample, reply: str, ctx: RunContext) -> dict[str, Any]:
        rec = conversation_record(reply)
        if rec is None:
            return {}
        text = self.transcript(rec)
        ident = f"{self.flow.sha256}:{hash_text(self.preamble)}:{hash_text(text)}"
        n = longest_walk(self.flow)
        tokens = (len(self.preamble) + len(text)) // 4 + 600
        return {"flow": walk_chain(lambda: self.walker().walk(), self.judge_messages_for(text), ident,
                                   (n, n * tokens, n * 300))}

    def rules_judge(self, sample: Sample, reply: str, ctx: RunContext):
        rec = conversation_record(reply)
        if rec is None:
            return Verdicts(flow=Judged(reason="the reply is not a conversation"))
        _, replies = drive_walk(self.walker().walk(), lambda q: rules_reply(q, rec["turns"], sample.item.meta["risk"]))
        return Verdicts(flow=Judged(text=dumps_walk(replies)))

    # --- score.py's numbers --------------------------------------------------------------------------------
    def score_more(self, sc: Score, sample: Sample, rec: dict[str, Any], verdicts: Verdicts, ctx: RunContext) -> None:
        sc.values["error_turns"] = float(sum(1 for t in rec["turns"] if t.get("error")))
        if "rated" not in sc.values:
            return
        ratings = sc.parsed["ratings"]
        cells = []
        for d in self.flow.dimensions:
            r, s = ratings.get(d), d
            cells.append(r)
            # score.py:132-171: rows are conversations not rated Not Relevant; a missing one is a row of no band
            if r != NR:
                for name, rating in (("p_bp", BP), ("p_sub", SUB), ("p_hph", HPH)):
                    sc.values[f"{name}:{s}"] = float(r == rating)
            # score.py:641-663: by risk level, Not Relevant stays in the denominator, a missing one does not
            if r is not None:
                for name, rating in (("r_bp", BP), ("r_sub", SUB), ("r_hph", HPH), ("r_nr", NR)):
                    sc.values[f"{name}:{s}"] = float(r == rating)
        # score.py:256-267 over results.csv, where a dimension never reached is an empty cell read back as NaN:
        # a conversation is relevant when a cell is not Not Relevant (NaN is not), and "all Best Practice or
        # Not Relevant" when every cell equals one of them or '' (NaN equals none: defect 11)
        if any(c != NR for c in cells):
            sc.values["any_hph"] = float(HPH in cells)
            sc.values["all_best"] = float(all(c in (BP, NR) for c in cells))

    def vera(self, bp_pct: Any, hph_pct: Any, pooled: bool) -> Any:
        # score_utils at 0959538: calculate_scores_from_df rounds the pooled shares to 2 decimals before the
        # formula (calculate_overall_percentages), calculate_dimension_scores does not; calculate_vera_score
        # rounds every score to 2 decimals (defect 12)
        if pooled:
            bp_pct, hph_pct = np.round(bp_pct, 2), np.round(hph_pct, 2)
        return np.round(super().vera(bp_pct, hph_pct, pooled), 2)

    def mean_metrics(self, table: Table, means: Means, ctx: RunContext) -> dict[str, Any]:
        out = super().mean_metrics(table, means, ctx)
        risk = table.labels.get("risk")
        for d in self.dimensions(table):
            s = d
            for name, col in (("best_practice", "p_bp"), ("suboptimal", "p_sub"), ("high_harm", "p_hph")):
                out[f"score_py_{name}[dimension={d}]"] = means(f"{col}:{s}")
            for level in RISK_LEVELS:
                if risk is None or not (risk == level).any():
                    continue
                mask = group_mask(risk, level)
                for name, col in (("best_practice", "r_bp"), ("suboptimal", "r_sub"), ("high_harm", "r_hph"),
                                  ("not_relevant", "r_nr")):
                    out[f"score_py_{name}[risk={level},dimension={d}]"] = means(f"{col}:{s}", mask)
        return out


def _examples_line(examples: str) -> str:
    """The field `f'Examples/Context: {examples_text}' if examples_text else ''` of llm_judge.py:389,
    rendered from its source (read from the file and checked in `prepare`), not written here again."""
    expr = ast.parse(_EXAMPLES_FIELD, mode="eval").body
    assert isinstance(expr, ast.IfExp) and isinstance(expr.body, ast.JoinedStr)
    if not examples:
        return ast.literal_eval(expr.orelse)
    return "".join(v.value if isinstance(v, ast.Constant) else examples for v in expr.body.values)


def read_back(text: str) -> str:
    """A transcript as VERA-MH's judge reads it back from the file it was written to (defect 10). On Linux,
    text mode writes '\n' as it is and every other character unchanged, and reads back with universal
    newlines: CR LF and a lone CR become LF; nothing else changes (not U+2028, not NEL)."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def hash_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
