"""The dependency pins hang together: every declared requirement has an exact version in constraints.txt
that its range admits, torch is pinned in .ci/run only (inside the hf extra's range), and CI installs
through the constraints file."""

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
EXTRAS = ("dev", "hf", "ray", "hub")


def pins() -> dict[str, str]:
    out = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep and version, f"constraints.txt: not an exact pin: {line!r}"
            out[canonicalize_name(name)] = version
    return out


def declared() -> list[Requirement]:
    return [Requirement(r) for r in PROJECT["dependencies"] + [r for e in EXTRAS
                                                               for r in PROJECT["optional-dependencies"][e]]]


def test_every_requirement_is_pinned_inside_its_range():
    pinned = pins()
    for req in declared():
        name = canonicalize_name(req.name)
        if name == "torch":
            continue
        assert name in pinned, f"{req} has no pin in constraints.txt (python .ci/constraints.py > constraints.txt)"
        assert req.specifier.contains(pinned[name], prereleases=True), f"{name}=={pinned[name]} is outside {req}"


def test_every_requirement_has_an_upper_bound():
    for req in declared():
        assert any(s.operator in ("<", "<=", "==", "~=") for s in req.specifier), f"{req} has no upper bound"


def test_torch_is_pinned_in_ci_only_and_inside_the_hf_range():
    assert "torch" not in pins()
    ci = (ROOT / ".ci/run").read_text()
    exact = re.findall(r'"torch==([^"]+)"', ci)
    assert len(exact) == 1, "CI pins torch exactly once"
    (torch,) = [r for r in declared() if canonicalize_name(r.name) == "torch"]
    assert torch.specifier.contains(exact[0]) and "==" not in str(torch.specifier)


def test_ci_installs_through_the_constraints_file():
    installs = [ln for ln in (ROOT / ".ci/run").read_text().splitlines() if re.match(r"\s*pip install", ln)]
    assert len(installs) == 2 and all("-c constraints.txt" in ln for ln in installs), installs
