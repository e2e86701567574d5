"""Small JSON files one step writes and another step or the report reads: each a typed record with its name.

* `lambda.json` (`LambdaChoice`): NeuroShard+'s `plus_lambda` chosen on the
  on-policy plans' measurements (eval/onpolicy.py); the planning steps pass
  it on, the report shows it.
* `model_error.json` (`ModelErrorReport`): the simulator's error on the
  evaluation's measured plans under several sets of cost models
  (model_error.py); the report shows it.
* `plan_error_<n>.json` (`PlanErrorReport`): the band calibrated on the
  on-policy plans (calibrate_band.py); the report shows it (the record
  itself travels in the forward comm model's checkpoint).

Each is written atomically and read back by the codec (`types.codec`); a
malformed file is an InputError naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neuroshard.formats.io import load_json, write_json_atomic
from neuroshard.types.codec import Record, json_field
from neuroshard.types.costs import PlanError
from neuroshard.types.errors import InputError

LAMBDA_JSON = "lambda.json"
MODEL_ERROR_JSON = "model_error.json"
ROUND_CALIBRATION_JSON = "round_calibration.json"  # eval.round_calibration.RoundCalibration, beside results.json
ROUND_ANCHORS_JSON = "round_anchors.json"  # the per-round anchors' measurements, beside results.json


def plan_error_json(ndevices: int) -> str:
    """The name of the band calibration's report for `ndevices` devices."""
    return f"plan_error_{ndevices}.json"


@dataclass
class LambdaChoice(Record):
    """NeuroShard+'s `plus_lambda` chosen on hardware: each value's mean measured plan cost over the `tasks`
    training tasks valid for all (ms), the smallest value (`default`), each other value's paired difference
    with it (`vs_default_ms`: an interval's JSON, ms), the value `chosen` and the `rule` that chose it."""

    lambdas: list[float]
    mean_ms: dict[str, float | None]
    chosen: float
    tasks: int
    default: float
    vs_default_ms: dict[str, dict[str, Any]]
    rule: str


@dataclass
class ModelErrorReport(Record):
    """The simulator's error on measured plans under each labelled set of cost models: the results file, each
    set's checkpoints, and each set's accuracy (`eval.accuracy.Accuracy`'s JSON) and, with the rounds' anchors,
    its error after the per-round calibration (`eval.round_calibration.RoundCalibration`'s JSON)."""

    results: str
    models: dict[str, list[str]]
    accuracy: dict[str, dict[str, Any]]
    round_calibrated: dict[str, dict[str, Any]] = json_field(default_factory=dict, omit=lambda v: not v)


@dataclass
class PlanErrorReport(Record):
    """The band calibrated on the on-policy plans: the measured plans it used (`results`, `task_path`), the
    models it calibrated, the models whose plan-level and per-rank errors it took out of sample (None: in
    sample; the field keeps the name of the release that took only the per-rank one there, and
    `plan_level_heldout` says which: False in that release's files), and the record written into the forward
    checkpoint."""

    results: str
    task_path: str
    models: list[str]
    rank_error_models: str | None
    plan_error: PlanError
    plan_level_heldout: bool = False


def write_side_file(path, record: Record) -> None:
    write_json_atomic(path, record.to_json())


def read_side_file(path, cls):
    """The `cls` record of the JSON file `path`; InputError naming the file when it is not one."""
    try:
        return cls.from_json(load_json(Path(path)))
    except KeyError as e:
        raise InputError(path, f"not a {cls.__name__}: missing {e}") from None
    except (TypeError, ValueError) as e:
        raise InputError(path, f"not a {cls.__name__}: {e}") from None


def read_lambda_choice(path) -> LambdaChoice:
    return read_side_file(path, LambdaChoice)
