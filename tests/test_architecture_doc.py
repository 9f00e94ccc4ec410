"""docs/architecture.md's first screen (*A task and its paper method, in one screen*) is true to the code:
its Python block runs, every class it shows is the real one of the module its comment names, with the same
bases, every hook it lists is written on that class itself with the same parameters, and every declaration
it gives has the real value."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import trustmh.tasks as tasks_pkg

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


def first_screen() -> str:
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## A task and its paper method, in one screen"):]
    return re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)


def classes_by_module(block: str) -> list[tuple[str, ast.ClassDef]]:
    """(module, class) for every class of the block, the module from the `# tasks/...py` comment above it."""
    out, module = [], None
    lines = block.splitlines()
    for node in ast.parse(block).body:
        for line in reversed(lines[:node.lineno - 1 - len(getattr(node, "decorator_list", []))]):
            m = re.match(r"# (tasks/\S+)\.py", line)
            if m:
                module = "trustmh." + m.group(1).replace("/", ".").removesuffix(".__init__")
                break
        if isinstance(node, ast.ClassDef):
            out.append((module, node))
    return out


def namespace() -> dict:
    """What the block's names mean: the real modules' globals (register made harmless: the task is
    registered already)."""
    ns: dict = {}
    for name in ("trustmh.tasks.ethics.common", "trustmh.tasks.ethics.paper", "trustmh.tasks.ethics"):
        ns.update(vars(importlib.import_module(name)))
    ns["register"] = lambda cls: cls
    return ns


def test_the_first_screen_runs_and_every_class_is_the_real_one():
    block = first_screen()
    ns = namespace()
    exec(compile(block, str(DOC), "exec"), dict(ns))  # it runs: every name it uses exists
    shown = classes_by_module(block)
    assert [c.name for _, c in shown] == ["ReasoningMethod", "ReasoningOwn", "ReasoningPaper", "EthicalReasoning"]
    for module, node in shown:
        real = getattr(importlib.import_module(module), node.name)
        assert real.__module__ == module, (node.name, real.__module__)
        assert [ast.unparse(b) for b in node.bases] == [b.__name__ for b in real.__bases__], node.name
        for item in node.body:
            if isinstance(item, ast.FunctionDef):  # a hook the class writes itself, with the same parameters
                assert item.name in vars(real), f"{node.name}.{item.name} is not written on {node.name}"
                assert [a.arg for a in item.args.args] == list(inspect.signature(vars(real)[item.name]).parameters)
            elif isinstance(item, ast.Assign):  # a declaration and its value
                names = [t.id for t in (item.targets[0].elts if isinstance(item.targets[0], ast.Tuple)
                                        else item.targets)]
                values = eval(compile(ast.Expression(item.value), str(DOC), "eval"), ns)
                values = values if len(names) > 1 else (values,)
                for name, value in zip(names, values):
                    got = getattr(real, name)
                    if isinstance(value, tuple) and value and value[-1] is Ellipsis:  # the first ones shown
                        got, value = got[:len(value) - 1], value[:-1]
                    assert got == value, (node.name, name)


def test_the_task_shown_is_the_registered_one_and_its_methods_answer_the_engine():
    task = tasks_pkg.TASKS["ethics.reasoning"]()
    from trustmh.tasks.ethics import ReasoningOwn
    from trustmh.tasks.ethics.paper import ReasoningPaper
    assert type(task.method(tasks_pkg.RunContext(protocol="trustmh"))) is ReasoningOwn
    assert type(task.method(tasks_pkg.RunContext(protocol="paper"))) is ReasoningPaper
    assert task.paper_protocol
