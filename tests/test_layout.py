"""The package layout's import rules, no import cycle, and no test hooks in production code.

Layers depend on each other in one direction (`ALLOWED`; a layer always
imports itself and the shared modules). A layer is a folder of the package,
and every module in a folder is in its layer (none sits lower than the rest):

    data <- planner <- learned <- eval <- torchrec <- pipeline
    data <- measure <- (learned, eval)
    data, planner.costs <- train <- eval

No module imports one of a higher layer, function-level imports included (the
checker reads whole files). `types/`, `checks`, `settings`, `problem`,
`formats/` and `numerics` are shared by all (`types/` and `numerics` import
nothing else of the package, `formats/` and `checks` only `types/`, `settings`
those, `problem` those and `settings`); no library module imports `cli` (only a
`python -m` entry point may, under `if __name__ == "__main__":` or in a
`__main__` module, and a script's shared `main`, `SCRIPT_MAINS`). No module
imports another that (through any chain, function-level imports included)
imports it back. Importing the planner, the registry with every sharder and
the learned baselines' registration loads neither FBGEMM, torch.distributed
nor matplotlib (so not torch either: `import torch` loads torch.distributed).
"""

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "neuroshard"
SHARED = ("neuroshard.types", "neuroshard.checks", "neuroshard.settings", "neuroshard.problem", "neuroshard.formats",
          "neuroshard.numerics")
BASE = ("neuroshard.types", "neuroshard.checks")
# the shared modules that import fewer than all of SHARED -> the shared ones they may import
SHARED_IMPORTS = {"types": (), "numerics": (), "checks": BASE, "settings": BASE, "formats": BASE}
# layer (a folder) -> the neuroshard modules it may import besides itself and the shared ones (prefix match)
ALLOWED = {
    "types": (),  # the shared records import one another and nothing else
    "formats": (),
    "data": (),
    "planner": ("neuroshard.data",),
    "measure": ("neuroshard.data",),
    "train": ("neuroshard.planner.costs", "neuroshard.data"),
    "learned": ("neuroshard.planner", "neuroshard.measure", "neuroshard.data"),
    "eval": ("neuroshard.planner", "neuroshard.learned", "neuroshard.measure", "neuroshard.data", "neuroshard.train"),
    "torchrec": ("neuroshard.planner", "neuroshard.measure", "neuroshard.eval", "neuroshard.learned",
                 "neuroshard.data", "neuroshard.train"),
    "pipeline": ("neuroshard.eval", "neuroshard.torchrec"),
}
# top-level modules -> what they may import besides the shared ones
TOP = {"types": (), "checks": (), "settings": (), "problem": (), "cli": (), "numerics": (),
       "__init__": ("neuroshard.planner", "neuroshard.torchrec.planner")}
# library modules that are a script's `main` (the learned baselines' training scripts share theirs): they may
# use the CLI helpers
SCRIPT_MAINS = ("neuroshard.learned.trainer", "neuroshard.pipeline.__main__")
# modules that are torch code themselves: imported only lazily, once a model or policy is loaded or trained
TORCH_MODULES = ("neuroshard.planner.costs.nets",)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(path: Path, modules: dict[str, Path], name: str | None = None) -> list[tuple[int, str]]:
    """Every neuroshard module imported anywhere in the file of module `name` (default: the one `path` is)
    (functions and methods included), except under a `if __name__ == "__main__":` block;
    `from package import module` counts as the module."""
    tree = ast.parse(path.read_text())
    main_blocks = [n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test)]
    skip = {id(n) for block in main_blocks for n in ast.walk(block)}
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            mod = node.module
            if node.level:
                base = (name or _module_name(path)).rsplit(".", node.level - (path.name == "__init__.py"))[0]
                mod = f"{base}.{mod}"
            out += [(node.lineno, f"{mod}.{a.name}" if f"{mod}.{a.name}" in modules else mod) for a in node.names]
    return sorted({(line, m) for line, m in out if m == "neuroshard" or m.startswith("neuroshard.")})


def _within(mod: str, prefixes) -> bool:
    return any(mod == p or mod.startswith(p + ".") for p in prefixes)


def layer(name: str) -> str | None:
    """The layer of module `name`: the folder under the package it lies in (the package of that folder
    included), None for a top-level module."""
    rel = name.split(".")[1:]
    return rel[0] if len(rel) > 1 or (rel and (PACKAGE / rel[0]).is_dir()) else None


def violations(name: str, path: Path, modules: dict[str, Path]) -> list[str]:
    """What module `name` (its file `path`) imports against the rules, one line each."""
    rel = path.relative_to(PACKAGE) if path.is_relative_to(PACKAGE) else path
    key = layer(name)
    stem = name.split(".")[-1] if key is None and name != "neuroshard" else rel.stem
    if key is not None and key not in ALLOWED:
        return [f"{rel}: in no layer of ALLOWED"]
    allowed = ALLOWED[key] if key else TOP[stem]
    own = (f"neuroshard.{key}",) if key else ()
    # the shared modules themselves import only the ones below them
    shared = SHARED_IMPORTS.get(key or stem, SHARED)
    bad = []
    for line, mod in _imports(path, modules, name):
        if _within(mod, ("neuroshard.cli",)):
            if stem != "cli" and name not in SCRIPT_MAINS:
                bad.append(f"{rel}:{line}: imports the CLI helpers ({mod})")
            continue
        if not _within(mod, own + shared + allowed):
            bad.append(f"{rel}:{line}: imports {mod}")
    return bad


def test_layers_import_only_what_the_layout_allows():
    modules = _modules()
    bad = [line for name, path in modules.items() for line in violations(name, path, modules)]
    assert not bad, "\n".join(bad)


def test_every_folder_is_a_layer_and_every_layer_a_folder():
    """A module's layer is the folder it sits in: no layer of one module, no folder outside the rules, and
    what a layer may import names folders (or the packages within them)."""
    folders = {p.relative_to(PACKAGE).parts[0] for p in PACKAGE.rglob("*.py") if p.parent != PACKAGE}
    assert folders == set(ALLOWED)
    named = {a for allowed in ALLOWED.values() for a in allowed}
    assert all((ROOT / a.replace(".", "/")).is_dir() for a in named), named
    assert set(SHARED_IMPORTS) <= {m.split(".")[1] for m in SHARED}


def test_a_function_level_import_of_a_higher_layer_is_reported(tmp_path):
    """The checker reads the whole file: an import inside a function or a method counts as one at the top
    (only a `__main__` block is left out), and one the layer may make is not reported."""
    path = tmp_path / "fake.py"
    path.write_text("from neuroshard.planner.costs.runtime_model import FEATURES\n"  # the planner's own
                    "from neuroshard.numerics import nnls\n"  # shared
                    "\n"
                    "def f():\n"
                    "    from neuroshard.torchrec.runtime_data import fit_runtime_model\n"
                    "    return fit_runtime_model\n"
                    "\n"
                    "class C:\n"
                    "    def g(self):\n"
                    "        import neuroshard.eval.planning\n"
                    "\n"
                    'if __name__ == "__main__":\n'
                    "    from neuroshard.pipeline import run\n")
    assert violations("neuroshard.planner.fake", path, _modules()) == [
        f"{path}:5: imports neuroshard.torchrec.runtime_data", f"{path}:10: imports neuroshard.eval.planning"]
    # the same file in torchrec/, which may import the planner and eval, breaks no rule
    assert violations("neuroshard.torchrec.fake", path, _modules()) == []


def test_the_layout_rules_are_one_way():
    """The allowed imports between layers form no cycle (so neither can the code that obeys them)."""
    edges = {k: {layer(a) for a in allowed} - {k} for k, allowed in ALLOWED.items()}
    seen, done = set(), set()

    def visit(f, path):
        assert f not in seen or f in done, f"the layout rules have a cycle: {' -> '.join(path + [f])}"
        if f in done:
            return
        seen.add(f)
        for g in edges.get(f, ()):
            visit(g, path + [f])
        done.add(f)

    for f in edges:
        visit(f, [])


def import_cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted: the import cycles."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def connect(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in graph:
        if v not in index:
            connect(v)
    return sorted(cycles)


def test_import_cycles_by_hand():
    assert import_cycles({"a": ["b"], "b": ["c"], "c": []}) == []
    assert import_cycles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c"]]
    assert import_cycles({"a": ["b"], "b": ["a"], "c": ["d"], "d": ["c"]}) == [["a", "b"], ["c", "d"]]


def test_the_package_has_no_import_cycle():
    """No module imports, directly or through others (function-level imports included), a module that
    imports it back."""
    modules = _modules()
    graph = {name: sorted({m for _, m in _imports(path, modules) if m in modules and m != name})
             for name, path in modules.items()}
    assert not import_cycles(graph), f"import cycles: {import_cycles(graph)}"


def test_importing_the_planner_and_every_sharder_loads_no_fbgemm_distributed_or_matplotlib():
    planner = sorted(name for name in _modules() if name.startswith("neuroshard.planner.")
                     and name not in TORCH_MODULES)
    code = (f"import sys, json\nimport neuroshard, neuroshard.planner\nfor m in {planner!r}: __import__(m)\n"
            "import neuroshard.learned.sharders\nnames = neuroshard.algorithm_names()\n"
            "assert 'dreamshard' in names and 'autoshard' in names, names\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('fbgemm_gpu', 'matplotlib') "
            "or m.startswith('torch.distributed') or m == 'torch')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert json.loads(out.stdout) == [], f"{planner} pulled in {out.stdout}"
    assert "neuroshard.planner.search.beam" in planner and "neuroshard.planner.simulator" in planner


def test_no_test_hooks_in_production_code():
    for path in [*PACKAGE.rglob("*.py"), *ROOT.glob("*.py"), *(ROOT / "tools").glob("*.py")]:
        text = path.read_text()
        assert "NEUROSHARD_TEST" not in text, path
        assert '"--fault"' not in text and "FAULTY_RANKS" not in text, path


def test_no_two_modules_share_a_name():
    """A module's file name says what it is wherever it is imported from (`__init__` and `__main__` aside)."""
    stems: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        if path.stem not in ("__init__", "__main__"):
            stems.setdefault(path.stem, []).append(str(path.relative_to(PACKAGE)))
    assert not {k: v for k, v in stems.items() if len(v) > 1}
