"""The package layout's import rules, and no test hooks in production code.

Subpackages depend on each other in one direction: `data` <- `planner` <-
`eval`, `bench` <- `eval`, and `train` uses only the planner's model types
(`planner.models`, `planner.nets`). Every module may use the shared
`types`, `formats` and `checks`; no library module imports `cli` (only a
`python -m` entry point may, under `if __name__ == "__main__":`). Importing
the planner loads neither FBGEMM, torch.distributed nor matplotlib (so not
torch either: `import torch` loads torch.distributed).
"""

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "neuroshard"
SHARED = {"neuroshard", "neuroshard.types", "neuroshard.formats", "neuroshard.checks"}
# subpackage -> the neuroshard modules it may import besides the shared ones (prefix match)
ALLOWED = {
    "data": ("neuroshard.data",),
    "planner": ("neuroshard.planner", "neuroshard.data"),
    "bench": ("neuroshard.bench", "neuroshard.data"),
    "train": ("neuroshard.train", "neuroshard.planner.models", "neuroshard.planner.nets"),
    "eval": ("neuroshard.eval", "neuroshard.planner", "neuroshard.bench", "neuroshard.data", "neuroshard.train"),
}
TOP = {"types": (), "checks": (), "formats": (), "cli": (), "__init__": ("neuroshard.planner",)}
# planner modules that are torch code themselves (cost-model nets, the learned baselines, the RL
# estimators): imported only lazily, once a model or policy is loaded or trained
TORCH_MODULES = ("nets", "dreamshard_nets", "autoshard_nets", "rl")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every neuroshard module imported anywhere in the file (functions included), except under a
    `if __name__ == "__main__":` block."""
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
            if node.level:
                base = _module_name(path).rsplit(".", node.level - (path.name == "__init__.py"))[0]
                mod = f"{base}.{node.module}"
            else:
                mod = node.module
            # `from neuroshard.eval import plans` imports neuroshard.eval.plans
            out += [(node.lineno, f"{mod}.{a.name}" if mod in ("neuroshard", *[f"neuroshard.{p}" for p in ALLOWED])
                     and a.name != "*" else mod) for a in node.names]
    return [(line, m) for line, m in out if m == "neuroshard" or m.startswith("neuroshard.")]


def test_subpackages_import_only_what_the_layout_allows():
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if len(rel.parts) == 1:
            allowed = TOP[rel.stem]
        else:
            allowed = ALLOWED[rel.parts[0]]
        for line, mod in _imports(path):
            if mod == "neuroshard.cli" or mod.startswith("neuroshard.cli."):
                if rel.stem != "cli":
                    bad.append(f"{rel}:{line}: imports the CLI helpers ({mod})")
                continue
            top = mod if mod.count(".") < 1 else ".".join(mod.split(".")[:2])
            if top in SHARED or mod in SHARED or any(mod == a or mod.startswith(a + ".") for a in allowed):
                continue
            bad.append(f"{rel}:{line}: imports {mod}")
    assert not bad, "\n".join(bad)


def test_importing_the_planner_loads_no_fbgemm_distributed_or_matplotlib():
    planner = sorted(f"neuroshard.planner.{p.stem}" for p in (PACKAGE / "planner").glob("*.py")
                     if p.stem not in ("__init__", *TORCH_MODULES))
    code = (f"import sys, json\nimport neuroshard, neuroshard.planner\nfor m in {planner!r}: __import__(m)\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('fbgemm_gpu', 'matplotlib') "
            "or m.startswith('torch.distributed') or m == 'torch')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert json.loads(out.stdout) == [], f"{planner} pulled in {out.stdout}"
    assert "neuroshard.planner.search" in planner and "neuroshard.planner.simulator" in planner


def test_no_test_hooks_in_production_code():
    for path in [*PACKAGE.rglob("*.py"), *ROOT.glob("*.py"), *(ROOT / "tools").glob("*.py")]:
        text = path.read_text()
        assert "NEUROSHARD_TEST" not in text, path
        assert '"--fault"' not in text and "FAULTY_RANKS" not in text, path
