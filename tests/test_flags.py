"""Every flag of every script is declared once: one settings field, one entry of the flag catalog
(`settings.FLAGS`) or one `add_argument` line, whichever scripts it appears in.

Each script's `main(["--help"])` runs with `add_argument` watched; the place
that declared each option is where the call came from: a `Settings` field
(`Settings.add_args`), a catalog entry (`settings.add_flag`) or the line
that called `add_argument` itself.
"""

import argparse
import contextlib
import io
import runpy
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from neuroshard import settings

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted([*ROOT.glob("*.py"), *(ROOT / "tools").glob("*.py"), *(ROOT / "benchmarks").glob("*.py"),
                  ROOT / "neuroshard" / "pipeline" / "run.py"])
SCRIPTS = [p for p in SCRIPTS if p.name != "setup.py"]


def _site(frame_info) -> str:
    """Where an option was declared, from the frames above `add_argument`."""
    for info in frame_info:
        code = info.frame.f_code
        if info.filename == settings.__file__ and code.co_name == "add_args":
            cls, f = info.frame.f_locals["cls"], info.frame.f_locals["f"]
            if f.metadata.get("catalog"):
                return f"settings.FLAGS[{f.metadata['catalog']!r}]"
            return f"{cls.__module__}.{cls.__qualname__}.{f.name}"
        if info.filename == settings.__file__ and code.co_name == "add_flag":
            return f"settings.FLAGS[{info.frame.f_locals['name']!r}]"
        if info.filename != argparse.__file__ and info.filename != __file__:
            path = Path(info.filename).resolve()
            return f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{info.lineno}"
    raise AssertionError("no caller")


def _watch(scripts) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Run each script's `main(["--help"])` with `add_argument` watched: (option string -> the places that
    declared it, script name -> its option strings)."""
    import inspect

    sites: dict[str, set[str]] = defaultdict(set)
    options: dict[str, set[str]] = defaultdict(set)
    original = argparse._ActionsContainer.add_argument
    current = [""]

    def watched(self, *names, **kw):
        site = _site(inspect.stack(context=0)[1:])
        for n in names:
            if n.startswith("--") and n != "--help":
                sites[n].add(site)
                options[current[0]].add(n)
        return original(self, *names, **kw)

    argparse._ActionsContainer.add_argument = watched
    try:
        for path in scripts:
            current[0] = Path(path).name
            namespace = runpy.run_path(str(path), run_name="flag_check")
            with contextlib.redirect_stdout(io.StringIO()), pytest.raises(SystemExit):
                namespace["main"](["--help"])
    finally:
        argparse._ActionsContainer.add_argument = original
    return sites, options


def declarations(scripts) -> dict[str, set[str]]:
    """option string -> the places that declared it, over `scripts` (each run as `main(["--help"])`)."""
    return _watch(scripts)[0]


def parsed_options(scripts) -> dict[str, set[str]]:
    """script name -> the option strings its parser has."""
    return _watch(scripts)[1]


def test_every_script_declares_its_flags_through_one_place_each():
    sys.path.insert(0, str(ROOT))
    sites = declarations(SCRIPTS)
    assert "--ndevices" in sites and "--max_mem" in sites and "--seed" in sites
    twice = {flag: sorted(where) for flag, where in sites.items() if len(where) > 1}
    assert not twice, "\n".join(f"{flag}: {', '.join(where)}" for flag, where in sorted(twice.items()))


def test_the_check_finds_a_flag_declared_twice(tmp_path):
    for name, line in (("a.py", 'p.add_argument("--ndevices", type=int)'),
                       ("b.py", 'p.add_argument("--ndevices", type=int, default=4)')):
        (tmp_path / name).write_text("import argparse\n\ndef main(argv):\n    p = argparse.ArgumentParser()\n"
                                     f"    {line}\n    p.parse_args(argv)\n")
    sites = declarations([tmp_path / "a.py", tmp_path / "b.py"])
    assert len(sites["--ndevices"]) == 2
