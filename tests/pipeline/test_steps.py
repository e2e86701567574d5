"""The step table's steps of each world count (pipeline/steps.py: 3f-3h, 4k, 4l), the presets' world counts and
their samples (pipeline/presets.py), and where the models for any world size land beside the run's own."""

from dataclasses import replace
from pathlib import Path

import pytest

from neuroshard.pipeline.presets import PRESETS, world_samples
from tests.pipeline.test_run import steps_of

R = Path("r")


def flags_of(step) -> dict:
    """A step's flags by name, a switch's value True."""
    argv, out = step.argv[1:], {}
    for i, a in enumerate(argv):
        if a.startswith("--"):
            out[a] = True if i + 1 == len(argv) or argv[i + 1].startswith("--") else argv[i + 1]
    return out


def test_each_count_gets_its_share_of_what_the_own_counts_collection_costs():
    # a sample at k ranks costs k + 8 units: 500 samples at 4 ranks cost 6,000; two other counts share them:
    # 2 ranks 3,000 / 10 = 300, 8 ranks 3,000 / 16 = 187.5
    assert world_samples(500, 4, 2, 2, 12) == 300 and world_samples(500, 4, 8, 2, 12) == 188
    assert world_samples(10, 2, 4, 1, 12) == 12  # 10 x 10 / 12 = 8.3, raised to the script's least
    assert world_samples(4, 2, 4, 1, 1) == 3 and world_samples(0, 2, 4, 1, 12) == 0
    with pytest.raises(ValueError, match="divide the comm batch 4096"):
        replace(PRESETS["study"], world_counts=(2, 3, 4))
    with pytest.raises(ValueError, match="at least two of them trained on"):
        replace(PRESETS["study"], world_counts=(2, 4), world_held=(4,))
    with pytest.raises(ValueError, match=r"world_held \(16,\) among them"):
        replace(PRESETS["study"], world_held=(16,))


def test_the_study_collects_its_other_world_counts_and_trains_the_world_models_judged_on_its_own():
    """Study: 4 devices, world counts 2, 4, 8 with 4 held out. 3f/3g collect at 2 and 8 ranks as 3c and 3d do at 4
    (every other flag theirs), 3h times the collectives there as 3e does; 4k trains on 2 and 8 and is judged on 3c's
    collection, 4l fits the collectives over 2 and 8 (3h@2's collection, nothing timed again) judged on 3e's."""
    steps = steps_of("--preset", "study")
    assert [k for k in steps if k[:2] in ("3f", "3g", "3h", "4k", "4l")] == \
        ["3f@2", "3f@8", "3g@2", "3g@8", "3h@2", "3h@8", "4k", "4l"]
    own, floor, coll = (flags_of(steps[k]) for k in ("3c", "3d", "3e"))
    for k, samples, noise, coll_samples, coll_noise in ((2, "300", "60", "144", "18"), (8, "188", "38", "90", "11")):
        data = flags_of(steps[f"3f@{k}"])
        assert data == {**own, "--out_dir": str(R / f"comm_data_{k}"), "--data_size": samples, "--ndevices": str(k)}
        assert flags_of(steps[f"3g@{k}"]) == {**floor, "--out_dir": data["--out_dir"], "--noise_floor": noise,
                                              "--ndevices": str(k)}
        assert steps[f"3g@{k}"].outputs == [R / f"comm_data_{k}" / "noise_floor.json"]
        timed = flags_of(steps[f"3h@{k}"])
        assert timed == {**coll, "--out_dir": str(R / f"collective_data_{k}"), "--data_size": coll_samples,
                         "--noise_samples": coll_noise, "--ndevices": str(k),
                         "--out_path": str(R / f"collective_data_{k}" / f"collectives_{k}.json")}
    fit = flags_of(steps["4k"])
    assert steps["4k"].argv[:3] == ["train_comm_cost_model.py", "--world", "1"]
    assert fit["--data_dir"] == f"{R / 'comm_data_2'},{R / 'comm_data_8'}"
    assert fit["--check_data_dirs"] == str(R / "comm_data") and fit["--ensemble"] == "3"
    assert steps["4k"].outputs == [R / "models" / "comm_fw.pt", R / "models" / "comm_bw.pt"]
    assert R / "comm_data" in steps["4k"].inputs
    world = flags_of(steps["4l"])
    assert world == {**flags_of(steps["3h@2"]), "--out_path": str(R / "models" / "collectives.json"),
                     "--world_data_dirs": str(R / "collective_data_8"), "--check_data_dirs": str(R / "collective_data")}
    # the run plans with its own count's models as before
    assert flags_of(steps["5c:paper"])["--fw_comm_model"] == str(R / "models" / "onpolicy" / "comm_4_fw.pt")
    assert flags_of(steps["5c:paper"])["--collective_model"] == str(R / "models" / "collectives_4.json")


def test_the_world_steps_run_where_the_preset_asks_and_follow_the_problems_count():
    quick = steps_of("--preset", "quick")  # the demo has no minute to spare
    assert not any(k[:2] in ("3f", "3g", "3h", "4k", "4l") for k in quick)
    tiny = steps_of("--preset", "tiny")  # the suite's smoke test: three 4-rank jobs would add 40 s to it
    assert not any(k[:2] in ("3f", "3g", "3h", "4k", "4l") for k in tiny)
    # 8 devices: 3c's data is the 8 ranks', the others collected; each count's share of 3c's 500 x (8 + 8) units
    eight = steps_of("--preset", "study", "--ndevices", "8")
    assert [k for k in eight if k.startswith("3f")] == ["3f@2", "3f@4"]
    assert [flags_of(eight[k])["--data_size"] for k in ("3f@2", "3f@4")] == ["400", "333"]
    assert flags_of(eight["4k"])["--data_dir"] == f"{R / 'comm_data_2'},{R / 'comm_data'}"
    assert flags_of(eight["4k"])["--check_data_dirs"] == str(R / "comm_data_4")
    # hosts: their groups timed on the problem's ranks only
    hosts = steps_of("--preset", "study", "--local_world_size", "2")
    assert {k for k, s in hosts.items() if "--local_world_size" in s.argv and k[:2] in ("3e", "3h", "4l")} == {"3e"}
    # GPUs: the first k of the run's
    gpus = steps_of("--preset", "study", "--gpu_devices", "0,1,2,3,4,5,6,7")
    assert flags_of(gpus["3f@2"])["--gpu_devices"] == "0,1" and flags_of(gpus["3f@4"])["--gpu_devices"] == "0,1,2,3"
    from neuroshard.types.errors import ConfigError

    with pytest.raises(ConfigError, match="--gpu_devices: 0,1,2,3 has 4 GPUs; the preset's world counts need 8"):
        steps_of("--preset", "study", "--gpu_devices", "0,1,2,3")


def test_only_and_list_name_a_step_of_one_world_count(capsys):
    from neuroshard.pipeline.run import _stamp_path, main, select
    from neuroshard.pipeline.steps import build_steps  # noqa: F401 (steps_of builds them)

    steps = list(steps_of("--preset", "study").values())
    assert select(steps, "3f@8") == {"3f@8"} and select(steps, "3f") == {"3f@2", "3f@8"}
    assert {"3f@2", "3g@8", "3h@2", "4k", "4l"} <= select(steps, "3,4")
    by_name = {s.name: s for s in steps}
    assert _stamp_path(R, by_name["3f@8"]) == R / "steps" / "3f@8.json"
    assert _stamp_path(R, by_name["6b:oversize"]) == R / "steps" / "6b-oversize.json"  # as before
    assert main(["--preset", "study", "--list", "--out_dir", "r"]) == 0
    table = capsys.readouterr().out.split("\n\n")[0].splitlines()
    assert [r.split()[-1] for r in table if r.startswith(("3f", "3h", "4k"))] == ["@2,8", "@2,8", "once"]


def test_a_runs_world_models_load_beside_the_models_it_plans_with(tmp_path):
    """Step 4k's pair and 4l's model in models/ beside the per-count ones: the run's folder still loads what the
    run plans with (its own count's on-policy models); models/ with another count binds the world pair to it,
    with its own count the random data's per-count pair."""
    from neuroshard.planner.costs.cost_models import CostModels
    from tests.planner.costs.test_cost_models import _write_run, write_world_models

    run = _write_run(tmp_path / "run")
    before = CostModels.load(run).describe()
    write_world_models(run / "models", sizes=(2, 8))
    assert CostModels.load(run).describe() == before and CostModels.load(run / "models").describe() == before
    own = CostModels.load(run / "models", 2)
    assert not own.any_world and own.ndevices == 2 and own.collectives.world is None
    other = CostModels.load(run / "models", 4)
    assert other.any_world and other.ndevices == 4 and other.collectives.world == 4
    assert other.describe().startswith("cost models for 4 devices: compute, comm models for any world size (trained "
                                       "on 2, 8); collective model")
    # the run's folder with another count: the on-policy models are its own count's, so the random data's world pair
    assert CostModels.load(run, 4).describe() == other.describe().replace(
        "cost models for", f"cost models from {run / 'models'} (the random data's) for")
