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


# --- issue 43: the tree the first screen shows is the engine's --------------------------------------------

ENGINE = Path(__file__).resolve().parents[1] / "src" / "trustmh" / "engine"
STAGES = ["spec", "prepare", "collect", "judge", "score", "run"]


def engine_modules() -> list[str]:
    """Every module of the engine package, by its path under engine/ ('spec', 'judge/_pool', ...)."""
    return sorted(str(p.relative_to(ENGINE).with_suffix("")).removesuffix("/__init__")
                  for p in ENGINE.rglob("*.py") if p.name != "__init__.py" or p.parent != ENGINE)


def test_the_engines_public_modules_are_its_stages():
    """engine/ reads as its pipeline: the only public modules are the stages, in the order the package
    docstring gives; everything else is private machinery behind engine/__init__."""
    import trustmh.engine as engine
    public = [m for m in engine_modules() if not any(part.startswith("_") for part in m.split("/"))]
    assert sorted(public) == sorted(STAGES), public
    order = [engine.__doc__.index(f"\n    {s} ") for s in STAGES]
    assert order == sorted(order), "the docstring lists the stages out of order"
    assert {m.split("/")[0].lstrip("_") for m in engine_modules()} >= {"store", "endpoint", "limiter", "budget"}


def test_the_architecture_tree_names_every_engine_module():
    text = DOC.read_text(encoding="utf-8")
    tree = text[text.index("## The tree"):text.index("## A task and its paper method")]
    for module in engine_modules():
        name = module.split("/")[-1]
        shown = f"{name}/" if (ENGINE / module).is_dir() else f"{name}.py"
        assert shown in tree, f"docs/architecture.md's tree does not show engine/{module}"
    for gone in ("rundir.py", "judge_pool.py", "panel_score.py", "judges.py "):
        assert f"engine/{gone}" not in text, gone


def test_lower_layers_never_import_the_engine_or_the_tasks():
    """data/, models/ and scoring/ sit below the engine and the tasks: none of their modules imports either
    (they write through trustmh.files, a leaf; the trust rules read a task through a Protocol)."""
    from test_import_cycles import SRC, import_graph
    graph = import_graph(SRC, "trustmh")
    low = ("trustmh.data", "trustmh.models", "trustmh.scoring", "trustmh.files")
    found = [f"{m} -> {t} ({w})" for m, edges in graph.items() if m.startswith(low)
             for t, w in edges.items() if t.startswith(("trustmh.engine", "trustmh.tasks"))]
    assert not found, found
    assert not [t for t in graph["trustmh.files"] if t.startswith("trustmh.") and t != "trustmh.errors"]


def test_no_engine_module_imports_a_pillar():
    """The engine runs any task through its methods and declarations: no engine module imports a pillar's
    package (a conversation's person, its turns, a task's option checks are asked of the task)."""
    from test_import_cycles import SRC, import_graph
    graph = import_graph(SRC, "trustmh")
    pillars = {f"trustmh.tasks.{p.name}" for p in (SRC / "trustmh" / "tasks").iterdir()
               if p.is_dir() and (p / "__init__.py").exists()}
    assert {"trustmh.tasks.crisis", "trustmh.tasks.robustness"} <= pillars
    found = [f"{m} -> {t} ({w})" for m, edges in graph.items() if m.startswith("trustmh.engine")
             for t, w in edges.items() if any(t == p or t.startswith(p + ".") for p in pillars)]
    assert not found, found
