"""`trustmh gate`'s output for CI systems, from its `Check`s: plain text (the default), a JSON document, JUnit
XML (one test case per check, which Jenkins, GitLab and most CI dashboards read) and GitHub Actions workflow
commands (an error annotation per failed check). Every format carries the same checks and the same summary
line; the exit code does not depend on the format."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from typing import Callable

from .gate import Check, summary



# Every writer takes the same arguments, so that the format registry (cli/formats.py) calls whichever was asked
# for alike; each uses what its format shows. `about`: which correction and margins a --baseline comparison
# ran (gate.check_baseline), said in every format; `warnings`: carried in the document by json and github
# (the others' command prints them on stderr); `clean`: what makes a run's text safe for the format.

def to_text(checks: list[Check], models: int, warnings: list[str] = (), clean: Callable[[str], str] = str,
            about: str = "") -> str:
    lines = [f"FAIL {clean(c.line())}" for c in checks if not c.passed]
    lines += [clean(about)] if about else []
    return "\n".join([*lines, clean(summary(checks)) + f" on {models} model(s)"]) + "\n"


def to_json(checks: list[Check], models: int, warnings: list[str] = (), clean: Callable[[str], str] = str,
            about: str = "") -> str:
    failed = [c for c in checks if not c.passed]
    return json.dumps({
        "passed": not failed, "summary": summary(checks) + f" on {models} model(s)", "baseline": about or None,
        "n_checks": len(checks), "n_failed": len(failed), "warnings": list(warnings),
        "checks": [{"model": c.model, "name": c.name, "kind": c.kind, "passed": c.passed,
                    "message": c.failure if c.failure is not None else c.detail} for c in checks],
    }, indent=2) + "\n"


def to_junit(checks: list[Check], models: int = 0, warnings: list[str] = (), clean: Callable[[str], str] = str,
             about: str = "") -> str:
    """One <testsuite> per model, one <testcase> per check (classname: the kind of check, name: what was
    checked); a failed check holds a <failure> whose message is the text output's FAIL line. `about` is each
    suite's property "baseline". `clean` keeps characters XML 1.0 cannot hold (most control characters) out of
    the document."""
    root = ET.Element("testsuites", name="trustmh gate", tests=str(len(checks)),
                      failures=str(sum(not c.passed for c in checks)))
    suites: dict[str, ET.Element] = {}
    for c in checks:
        suite = suites.get(c.model)
        if suite is None:
            suite = suites[c.model] = ET.SubElement(root, "testsuite", name=clean(c.model), tests="0", failures="0")
            if about:
                ET.SubElement(ET.SubElement(suite, "properties"), "property", name="baseline", value=clean(about))
        suite.set("tests", str(int(suite.get("tests")) + 1))
        case = ET.SubElement(suite, "testcase", classname=clean(c.kind), name=clean(c.name))
        if c.passed:
            if c.detail:
                ET.SubElement(case, "system-out").text = clean(c.detail)
        else:
            suite.set("failures", str(int(suite.get("failures")) + 1))
            ET.SubElement(case, "failure", message=clean(c.failure), type=clean(c.kind)).text = clean(c.line())
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _data(text: str) -> str:
    """A workflow command's message: '%', CR and LF escaped, as the runner reads them back."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    """A workflow command's property value: also ':' and ','."""
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def to_github(checks: list[Check], models: int, warnings: list[str] = (), clean: Callable[[str], str] = str,
              about: str = "") -> str:
    """GitHub Actions annotations: `::error` per failed check (titled with its kind and model), `::warning`
    per warning, then the summary line as plain text. A line of a model's name cannot start a command of its
    own: its line breaks are escaped."""
    lines = [f"::error title={_property(clean(f'trustmh gate: {c.kind} ({c.model})'))}::{_data(clean(c.line()))}"
             for c in checks if not c.passed]
    lines += [f"::warning title=trustmh gate::{_data(clean(w))}" for w in warnings]
    lines += [f"::notice title=trustmh gate::{_data(clean(about))}"] if about else []
    lines.append(re.sub(r"^::", ": :", clean(summary(checks) + f" on {models} model(s)")))
    return "\n".join(lines) + "\n"
