"""The collectives' cost model (`planner.costs.collective_model`): each form recovered from times it made, the
best form chosen on held-out samples (ties to the simpler), the noise floor, and the file read back (bad ones named)."""

import json

import numpy as np
import pytest

from neuroshard.planner.costs.collective_model import CollectiveModel, fit_collectives
from neuroshard.types.errors import ConfigError, InputError


def samples(op, f, sizes):
    return [{"op": op, "numel": int(n), "ms": float(f(n / 1e6))} for n in sizes]


SIZES = np.geomspace(1e4, 1e7, 16).astype(int)


def test_each_collective_gets_the_form_that_made_its_times():
    data = samples("all_reduce", lambda x: 0.5 + 3.0 * x, SIZES) + \
        samples("reduce_scatter", lambda x: 2.0 * x ** 0.7, SIZES)
    noise = [("all_reduce", 10.0, 11.0), ("all_reduce", 4.0, 3.0)]  # |11 - 10| / 10 and |3 - 4| / 4: 17.5%
    model = fit_collectives(data, 4, noise=noise)
    ar, rs = model.fit_of("all_reduce"), model.fit_of("reduce_scatter")
    assert ar.form == "linear" and ar.coef == pytest.approx([0.5, 3.0], rel=1e-6)
    assert rs.form == "power" and rs.coef == pytest.approx([np.log(2.0), 0.7], rel=1e-6)
    assert ar.test_mape["linear"] < 1e-6 < ar.test_mape["power"] and ar.samples == 16
    assert ar.noise_floor == pytest.approx(17.5) and rs.noise_floor is None
    # 2 M elements all-reduced: 0.5 + 3 x 2 ms; nothing sent costs nothing
    assert model.predict("all_reduce", [2_000_000, 0]).tolist() == pytest.approx([6.5, 0.0])
    with pytest.raises(ConfigError, match="no fit of all_gather"):
        model.predict("all_gather", 100)
    with pytest.raises(ValueError, match="all_gather: 3 samples, need at least 4"):
        fit_collectives(samples("all_gather", lambda x: 1 + x, SIZES[:3]), 4)


def test_a_bandwidth_that_drops_past_a_size_gets_the_hinge():
    # 1 ms + 0.5 ms/M, and 4 ms/M more past the median size (a knee the fit tries): no line fits it, the hinge
    # does exactly, and every sample is judged by a fit that never saw it
    x = SIZES / 1e6
    knee = float(np.quantile(x, 0.5))
    model = fit_collectives(samples("all_reduce", lambda v: 1.0 + 0.5 * v + 4.0 * max(0.0, v - knee), SIZES), 4)
    fit = model.fit_of("all_reduce")
    assert fit.form == "hinge" and fit.coef == pytest.approx([1.0, 0.5, 4.0, knee], rel=1e-6)
    assert fit.test_mape["hinge"] < fit.test_mape["linear"] and fit.test_mape["linear"] > 1.0
    # 10 M elements: 1 + 0.5 x 10 + 4 x (10 - knee)
    assert model.predict("all_reduce", 10_000_000) == pytest.approx(6.0 + 4.0 * (10.0 - knee))


def test_the_model_file_reads_back_and_bad_ones_are_named(tmp_path):
    model = fit_collectives(samples("all_gather", lambda x: 1.0 + x, SIZES), 2)
    model.save(tmp_path / "c.json")
    again = CollectiveModel.load(tmp_path / "c.json", 2)
    assert again.predict("all_gather", 1_000_000) == pytest.approx(2.0)
    with pytest.raises(InputError, match="fitted for 2 ranks, the plans are for 4"):
        CollectiveModel.load(tmp_path / "c.json", 4)
    raw = json.loads((tmp_path / "c.json").read_text())
    raw["fits"]["all_gather"]["form"] = "cubic"
    (tmp_path / "bad.json").write_text(json.dumps(raw))
    with pytest.raises(InputError, match="not a collective model: all_gather: form 'cubic'"):
        CollectiveModel.load(tmp_path / "bad.json", 2)
    (tmp_path / "other.json").write_text("{}")
    with pytest.raises(InputError, match="not a collective model: format None"):
        CollectiveModel.load(tmp_path / "other.json", 2)
    with pytest.raises(InputError, match=r"no collective model here \(collect_collective_cost_data.py fits one\)"):
        CollectiveModel.load(tmp_path / "missing.json", 2)


def test_host_groups_are_fitted_apart_and_named_by_their_size(tmp_path):
    # over all 4 ranks a reduce-scatter costs 1 + 2 ms/M; over each host's 2 ranks 0.2 + 0.5 ms/M
    data = samples("reduce_scatter", lambda x: 1.0 + 2.0 * x, SIZES) + \
        [s | {"k": 2} for s in samples("reduce_scatter", lambda x: 0.2 + 0.5 * x, SIZES)]
    model = fit_collectives(data, 4, noise=[("reduce_scatter@2", 4.0, 5.0)])
    assert set(model.fits) == {"reduce_scatter", "reduce_scatter@2"}
    assert model.predict("reduce_scatter", 2_000_000) == pytest.approx(5.0)
    assert model.predict("reduce_scatter", 2_000_000, 4) == pytest.approx(5.0)  # every rank, named
    assert model.predict("reduce_scatter", 2_000_000, 2) == pytest.approx(1.2)
    assert model.fit_of("reduce_scatter", 2).noise_floor == pytest.approx(25.0)
    assert model.fit_of("reduce_scatter").noise_floor is None
    assert model.has("reduce_scatter", 2) and not model.has("all_gather", 2) and not model.has("reduce_scatter", 1)
    with pytest.raises(ConfigError, match=r"has no fit of reduce_scatter@1 \(it has reduce_scatter, "
                                          r"reduce_scatter@2\)"):
        model.predict("reduce_scatter", 100, 1)
    model.save(tmp_path / "c.json")
    assert CollectiveModel.load(tmp_path / "c.json", 4) == model
    raw = json.loads((tmp_path / "c.json").read_text())
    raw["fits"]["reduce_scatter@3"] = raw["fits"].pop("reduce_scatter@2")
    (tmp_path / "bad.json").write_text(json.dumps(raw))
    with pytest.raises(InputError, match="fit 'reduce_scatter@3': not a collective .*a group size that divides "
                                         "the 4 ranks"):
        CollectiveModel.load(tmp_path / "bad.json", 4)


def world_samples(op, f, k, sizes=SIZES):
    """Samples of `op` over groups of k ranks timed by f(N in millions, k)."""
    return [{"op": op, "numel": int(n), "ms": float(f(n / 1e6, k))} for n in sizes]


def test_one_fit_over_collections_of_several_sizes_prices_the_sizes_between_them(tmp_path):
    from neuroshard.planner.costs.collective_model import check_collectives, fit_world_collectives

    # a ring: 0.1 ms + 0.05 ms a step (k - 1 of them) + 2 ms per million elements each rank moves, N (k - 1) / k
    def ring(x, k):
        return 0.1 + 0.05 * (k - 1) + 2.0 * x * (k - 1) / k

    collections = [(k, world_samples("all_gather", ring, k), [("all_gather", 2.0, 2.2)]) for k in (2, 4, 8)]
    model = fit_world_collectives(collections)
    fit = model.fit_of("all_gather", 3)
    assert model.any_world and model.ndevices is None and model.sizes == [2, 4, 8]
    assert fit.form == "world_linear" and fit.coef == pytest.approx([0.1, 0.05, 2.0], rel=1e-6)
    assert fit.noise_floor == pytest.approx(10.0) and fit.samples == 48
    # 6 ranks, never collected: 1 M elements cost 0.1 + 0.25 + 2 x 5/6 ms
    assert float(model.predict("all_gather", 1_000_000, 6)) == pytest.approx(0.35 + 10 / 6)
    held = check_collectives(model, 6, world_samples("all_gather", ring, 6))
    assert held["all_gather"]["mape"] < 1e-6 and held["all_gather"]["samples"] == 16
    # a problem of 6 ranks binds it: its every-rank group is 6, a host's group of 3 is priced as 3
    with pytest.raises(ConfigError, match="bind it"):
        model.predict("all_gather", 1_000_000)
    bound = model.for_world(6)
    assert float(bound.predict("all_gather", 1_000_000)) == pytest.approx(0.35 + 10 / 6)
    assert float(bound.predict("all_gather", 1_000_000, 3)) == pytest.approx(0.2 + 4 / 3)
    assert bound.has("all_gather") and bound.has("all_gather", 3) and not bound.has("all_reduce")
    # the file: no device count, read back for any world
    model.save(tmp_path / "collectives.json")
    again = CollectiveModel.load(tmp_path / "collectives.json", 5)
    assert again.ndevices is None and again.world == 5 and "world" not in json.loads(
        (tmp_path / "collectives.json").read_text())
    assert float(again.predict("all_gather", 1_000_000)) == pytest.approx(0.3 + 8 / 5)
