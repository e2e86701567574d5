"""Every flag of every script is declared once: one settings field, one entry of the flag catalog
(`settings.FLAGS`) or one `add_argument` line, whichever scripts it appears in; every script parses through
`settings.parse_flags`, and each old spelling of its flags (`settings.DEPRECATED_FLAGS`) warns once and parses
as the new one.

Each script's `main(["--help"])` runs with `add_argument` watched; the place
that declared each option is where the call came from: a `Settings` field
(`Settings.add_args`), a catalog entry (`settings.add_flag`) or the line
that called `add_argument` itself.
"""

import argparse
import contextlib
import functools
import io
import runpy
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from neuroshard import settings
from tests.scripts import run_script, script_path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted([*ROOT.glob("*.py"), *(ROOT / "tools").glob("*.py"), *(ROOT / "benchmarks").glob("*.py"),
                  ROOT / "neuroshard" / "pipeline" / "run.py"])
SCRIPTS = [p for p in SCRIPTS if p.name != "setup.py"]


def _site(frame) -> str:
    """Where an option was declared, from `frame` (the caller of `add_argument`) and the frames above it (walked
    by hand: `inspect.stack` reads every frame's source and made this test several times slower)."""
    while frame is not None:
        code, filename = frame.f_code, frame.f_code.co_filename
        if filename == settings.__file__ and code.co_name == "add_args":
            cls, f = frame.f_locals["cls"], frame.f_locals["f"]
            if f.metadata.get("catalog"):
                return f"settings.FLAGS[{f.metadata['catalog']!r}]"
            return f"{cls.__module__}.{cls.__qualname__}.{f.name}"
        if filename == settings.__file__ and code.co_name == "add_flag":
            return f"settings.FLAGS[{frame.f_locals['name']!r}]"
        if filename != argparse.__file__ and filename != __file__:
            path = Path(filename).resolve()
            return f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{frame.f_lineno}"
        frame = frame.f_back
    raise AssertionError("no caller")


def _watch(scripts) -> tuple[dict[str, set[str]], dict[str, set[str]], dict[str, set[str]]]:
    """Run each script's `main(["--help"])` with `add_argument` watched: (option string -> the places that
    declared it, script name -> its option strings, script name -> the names it gave `settings.parse_flags`)."""
    sites: dict[str, set[str]] = defaultdict(set)
    options: dict[str, set[str]] = defaultdict(set)
    parsed_as: dict[str, set[str]] = defaultdict(set)
    original = argparse._ActionsContainer.add_argument
    spellings = settings.deprecated_spellings
    current = [""]

    def watched(self, *names, **kw):
        site = _site(sys._getframe(1))
        for n in names:
            if n.startswith("--") and n != "--help":
                sites[n].add(site)
                options[current[0]].add(n)
        return original(self, *names, **kw)

    def seen(argv, script):
        parsed_as[current[0]].add(script)
        return spellings(argv, script)

    argparse._ActionsContainer.add_argument = watched
    settings.deprecated_spellings = seen
    try:
        for path in scripts:
            current[0] = Path(path).name
            namespace = runpy.run_path(str(path), run_name="flag_check")
            with contextlib.redirect_stdout(io.StringIO()), pytest.raises(SystemExit):
                namespace["main"](["--help"])
    finally:
        argparse._ActionsContainer.add_argument = original
        settings.deprecated_spellings = spellings
    return sites, options, parsed_as


def declarations(scripts) -> dict[str, set[str]]:
    """option string -> the places that declared it, over `scripts` (each run as `main(["--help"])`)."""
    return _watch(scripts)[0]


def parsed_options(scripts) -> dict[str, set[str]]:
    """script name -> the option strings its parser has."""
    return _watch(scripts)[1]


@functools.cache
def _every_script():
    """`_watch` over every script, once per test process."""
    sys.path.insert(0, str(ROOT))
    return _watch(SCRIPTS)


# the name each script's parse goes by in `settings.DEPRECATED_FLAGS` where it is not the file's
TABLE_NAMES = {"run.py": "neuroshard.pipeline"}


def test_every_script_declares_its_flags_through_one_place_each():
    sites = _every_script()[0]
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


def test_every_script_parses_through_the_table_of_old_spellings_under_its_own_name():
    parsed_as = _every_script()[2]
    assert {name: names for name, names in parsed_as.items()} == {
        p.name: {TABLE_NAMES.get(p.name, p.name)} for p in SCRIPTS}


def test_no_old_spelling_is_a_flag_of_its_script_and_each_new_one_is():
    options = _every_script()[1]
    by_table_name = {TABLE_NAMES.get(name, name): opts for name, opts in options.items()}
    assert set(settings.DEPRECATED_FLAGS) <= set(by_table_name)
    for script, table in settings.DEPRECATED_FLAGS.items():
        for old, entry in table.items():
            assert old not in by_table_name[script], f"{script}: {old} is still a flag"
            if isinstance(entry, settings.Renamed):
                assert entry.new in by_table_name[script], f"{script}: {old} -> {entry.new}, no such flag"


class _Parsed(Exception):
    pass


def _parse(script: str, argv) -> tuple[argparse.Namespace, str]:
    """What `script`'s command line `argv` parses to, and what parsing printed on stderr: its `main` stopped at
    its parser's `parse_args`."""
    main = runpy.run_path(str(script_path(script)), run_name="alias_check")["main"]
    original = argparse.ArgumentParser.parse_args

    def stop(self, args=None, namespace=None):
        raise _Parsed(original(self, args, namespace))

    err = io.StringIO()
    argparse.ArgumentParser.parse_args = stop
    try:
        with contextlib.redirect_stderr(err), pytest.raises(_Parsed) as parsed:
            main(list(argv))
    finally:
        argparse.ArgumentParser.parse_args = original
    return parsed.value.args[0], err.getvalue()


TRC = ["--data_dir", "d", "--task_path", "t.txt", "--out_path", "o.json"]
ERR = ["--data_dir", "d", "--task_path", "t.txt", "--results", "r.json"]
BAND = ["--data_dir", "d", "--task_path", "t.txt", "--results", "r.json", "--models", "m"]

# (script, its command line with old spellings, the same with the new ones, what the new flags hold)
ALIASES = [
    ("train_torchrec_cost_model.py", TRC + ["--samples", "s.json"], TRC + ["--results", "s.json"],
     {"results": "s.json", "check_results": None}),
    ("train_torchrec_cost_model.py", TRC + ["--model", "m.json", "--check", "c.json", "--check_task_path", "c.txt"],
     TRC + ["--model", "m.json", "--check_results", "c.json", "--check_task_path", "c.txt"],
     {"check_results": "c.json", "results": None}),
    ("model_error.py", ERR + ["--models", "a=m1", "--models=b=m2"], ERR + ["--model_set", "a=m1", "--model_set=b=m2"],
     {"model_set": ["a=m1", "b=m2"]}),
    ("calibrate_band.py", BAND + ["--rank_error_models", "h"], BAND + ["--heldout_models", "h"],
     {"heldout_models": "h", "models": "m"}),
    ("dataset_stats.py", ["ds", "--reference", "p.txt", "--reference_block", "2"],
     ["ds", "--published", "p.txt", "--published_block", "2"], {"published": "p.txt", "published_block": 2}),
    ("collect_compute_cost_data.py", ["--quiet"], ["--no_progress"], {"no_progress": True}),
    ("collect_comm_cost_data.py", ["--quiet"], ["--no_progress"], {"no_progress": True}),
    ("gen_dlrm_data.py", ["--synthetic", "--quiet"], ["--synthetic", "--no_progress"], {"no_progress": True}),
    ("gen_tasks.py", ["--hot", "1", "--hot_pooling", "50"], ["--hot", "1", "--hot_min_pooling", "50"],
     {"hot": 1, "hot_min_pooling": 50.0}),
    ("train_dreamshard.py", ["--gpu-devices", "0,1"], ["--gpu_devices", "0,1"], {"gpu_devices": "0,1"}),
    ("train_autoshard.py", ["--gpu-devices=0,1"], ["--gpu_devices=0,1"], {"gpu_devices": "0,1"}),
    ("benchmarks/bench_compute_collection.py", ["--samples", "7"], ["--num_samples", "7"], {"num_samples": 7}),
    ("benchmarks/bench_torchrec_planner.py", ["--tables", "30"], ["--num_tables", "30"], {"num_tables": 30}),
]


def _old_spellings(script: str, argv) -> list[str]:
    """The old spellings (`settings.DEPRECATED_FLAGS`) in `argv`, each once, in order."""
    table = settings.DEPRECATED_FLAGS[Path(script).name]
    return list(dict.fromkeys(a.partition("=")[0] for a in argv if a.partition("=")[0] in table))


@pytest.mark.parametrize("script, old, new, want", ALIASES,
                         ids=[f"{Path(s).name} {' '.join(_old_spellings(s, o))}" for s, o, _, _ in ALIASES])
def test_an_old_spelling_warns_once_and_parses_as_the_new_one(script, old, new, want):
    sys.path.insert(0, str(ROOT))
    got, err = _parse(script, old)
    expected, quiet = _parse(script, new)
    assert vars(got) == vars(expected) and not quiet
    assert {k: vars(got)[k] for k in want} == want
    table = settings.DEPRECATED_FLAGS[Path(script).name]
    assert err.splitlines() == [f"warning: {o} is deprecated; use {table[o].new}" for o in _old_spellings(script, old)]


def test_every_old_spelling_of_the_table_has_its_test():
    tested = {(Path(s).name, o) for s, old, _, _ in ALIASES for o in _old_spellings(s, old)}
    removed = {(s, o) for s, t in settings.DEPRECATED_FLAGS.items() for o, e in t.items()
               if isinstance(e, settings.Removed)}
    assert tested | removed == {(s, o) for s, t in settings.DEPRECATED_FLAGS.items() for o in t}


@pytest.mark.parametrize("script, argv, line", [
    ("train_comm_cost_model.py", ["--data_dir", "d", "--threads", "4"],
     "error: --threads: train_comm_cost_model.py no longer takes it: training runs on one thread (the models are "
     "tiny): leave it out"),
    ("collect_collective_cost_data.py", ["--out_dir", "c", "--out_path", "c.json", "--test_share=0.2"],
     "error: --test_share: collect_collective_cost_data.py no longer takes it: each form is now judged by "
     "cross-validation: give --folds K instead"),
])
def test_a_removed_flag_is_a_one_line_error_saying_what_to_do(tmp_path, script, argv, line):
    res = run_script(script, argv, cwd=tmp_path)
    assert res.returncode == 1 and res.stderr.strip() == line and not any(tmp_path.iterdir())
