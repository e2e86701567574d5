"""What a plan must respect besides memory: tables kept whole, the devices a table may use, tables that
share a device.

Tables are named by their position in the task's table list (before splits). A
`TableConstraints` travels inside the planning problem (`neuroshard.Problem`),
so every sharder sees it while it searches, and `simulator.validate_plan`
checks every plan against it, whichever algorithm made it:

* `whole`: tables that are never column-split (TorchRec's table-wise-only
  `ParameterConstraints`);
* `devices`: per table, the devices its pieces may go to (a rank list);
* `colocate`: groups of tables placed whole on one device together (a user's
  request TorchRec's planner has no way to say: tables read together, a
  shared cache). A group's allowed devices are those every member allows;
* `kinds`: per table, the spread kinds (`types.plan.SPREAD_KINDS`: row-wise,
  table-row-wise, data-parallel) it may take (TorchRec's
  `ParameterConstraints.sharding_types`); a table not listed may take any,
  unless it is in `whole` (then it is table-wise only). A table on some
  devices only or co-located is never spread;
* `min_dim`: per table, the narrowest column piece it may be split into
  (TorchRec's `ParameterConstraints.min_partition`); a table not listed is
  split while its halves' dims stay multiples of 4 (`types.tables.can_split`).

    problem = Problem(4, 1.0, constraints=TableConstraints(whole=(0,), devices=((2, (0, 1)),),
                                                           colocate=((3, 5),)))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from neuroshard.types.codec import Record, json_field
from neuroshard.types.errors import ConfigError
from neuroshard.types.plan import SPREAD_KINDS
from neuroshard.types.tables import can_split


@dataclass(frozen=True)
class TableConstraints(Record):
    """Per-table constraints by table position (module doc). Hashable (tuples only) so a problem that holds
    it stays a value."""

    whole: tuple[int, ...] = json_field((), omit=lambda v: not v)
    devices: tuple[tuple[int, tuple[int, ...]], ...] = json_field((), omit=lambda v: not v)
    colocate: tuple[tuple[int, ...], ...] = json_field((), omit=lambda v: not v)
    kinds: tuple[tuple[int, tuple[str, ...]], ...] = json_field((), omit=lambda v: not v)
    min_dim: tuple[tuple[int, int], ...] = json_field((), omit=lambda v: not v)

    def __post_init__(self):
        object.__setattr__(self, "whole", tuple(sorted({int(t) for t in self.whole})))
        object.__setattr__(self, "devices", tuple(sorted((int(t), tuple(sorted({int(d) for d in ds})))
                                                         for t, ds in self.devices)))
        object.__setattr__(self, "colocate", tuple(tuple(int(t) for t in g) for g in self.colocate))
        object.__setattr__(self, "kinds", tuple(sorted((int(t), tuple(sorted(set(ks)))) for t, ks in self.kinds)))
        object.__setattr__(self, "min_dim", tuple(sorted((int(t), int(d)) for t, d in self.min_dim)))
        if len({t for t, _ in self.min_dim}) != len(self.min_dim):
            raise ConfigError("constraints", "a table is given two narrowest piece dims")
        bad = [(t, d) for t, d in self.min_dim if d < 1]
        if bad:
            raise ConfigError("constraints", f"table {bad[0][0]}: the narrowest piece dim must be >= 1, got "
                                             f"{bad[0][1]}")
        for t, ks in self.kinds:
            bad = [k for k in ks if k not in SPREAD_KINDS]
            if bad:
                raise ConfigError("constraints", f"table {t}: {bad[0]!r} is not one of {', '.join(SPREAD_KINDS)}")
        if len({t for t, _ in self.kinds}) != len(self.kinds):
            raise ConfigError("constraints", "a table is given two lists of sharding types")
        for t, ds in self.devices:
            if not ds:
                raise ConfigError("constraints", f"table {t}: an empty device list leaves it nowhere to go")
        seen: dict[int, int] = {}
        for k, group in enumerate(self.colocate):
            if len(group) < 2:
                raise ConfigError("constraints", f"co-location group {list(group)}: needs two or more tables")
            for t in group:
                if t in seen:
                    raise ConfigError("constraints", f"table {t} is in two co-location groups "
                                                     f"({list(self.colocate[seen[t]])} and {list(group)})")
                seen[t] = k
        if len({t for t, _ in self.devices}) != len(self.devices):
            raise ConfigError("constraints", "a table is given two device lists")
        for group in self.colocate:
            shared = self.group_devices(group, ndevices=None)
            if shared is not None and not shared:
                raise ConfigError("constraints", f"co-location group {list(group)}: its tables' device lists share "
                                                 "no device")

    @property
    def empty(self) -> bool:
        return not (self.whole or self.devices or self.colocate or self.kinds or self.min_dim)

    def may_halve(self, t: int, dim: int) -> bool:
        """A piece of `dim` columns of table `t` may be split in two: the table is not kept whole, the halves'
        dims are multiples of 4 and not narrower than its `min_dim`."""
        return can_split(dim) and not self.kept_whole(t) and dim // 2 >= dict(self.min_dim).get(t, 1)

    def may_spread(self, t: int, kind: str, ndevices: int) -> bool:
        """Table `t` may be sharded `kind` over every rank: not co-located, allowed every device, and `kind`
        among its `kinds` when it has a list; without a list, unless it is kept whole (a table-wise-only
        table)."""
        if any(t in g for g in self.colocate):
            return False
        ds = self.allowed(t)
        if ds is not None and len(ds) < ndevices:
            return False
        for table, ks in self.kinds:
            if table == t:
                return kind in ks
        return t not in self.whole

    def allowed(self, t: int) -> tuple[int, ...] | None:
        """The devices table `t` may use, or None for any."""
        for table, ds in self.devices:
            if table == t:
                return ds
        return None

    def group_devices(self, group: Sequence[int], ndevices: int | None) -> tuple[int, ...] | None:
        """The devices every table of `group` allows (None: any; `ndevices` bounds them when given)."""
        out: set[int] | None = None if ndevices is None else set(range(ndevices))
        for t in group:
            ds = self.allowed(t)
            if ds is not None:
                out = set(ds) if out is None else out & set(ds)
        return None if out is None else tuple(sorted(out))

    def kept_whole(self, t: int) -> bool:
        """Table `t` may not be column-split (listed in `whole`, or in a co-location group)."""
        return t in self.whole or any(t in g for g in self.colocate)

    def check(self, ntables: int, ndevices: int) -> None:
        """ConfigError naming the table or device when the constraints name what the task does not have."""
        named = list(self.whole) + [t for t, _ in self.devices] + [t for g in self.colocate for t in g] + [
            t for t, _ in self.kinds] + [t for t, _ in self.min_dim]
        bad = [t for t in named if not 0 <= t < ntables]
        if bad:
            raise ConfigError("constraints", f"table {bad[0]}: the task has {ntables} tables (0..{ntables - 1})")
        for t, ds in self.devices:
            off = [d for d in ds if not 0 <= d < ndevices]
            if off:
                raise ConfigError("constraints", f"table {t}: device {off[0]} is not among the {ndevices} devices")
        for group in self.colocate:
            if not self.group_devices(group, ndevices):
                raise ConfigError("constraints", f"co-location group {list(group)}: its tables' device lists share "
                                                 "no device")

    def violation(self, pieces: Sequence[Sequence], kinds: dict[int, str] | None = None) -> str | None:
        """How a plan breaks the constraints, in words (None when it keeps them). `pieces`: per table (task
        order) its column pieces, each with a `device` (`types.plan.plan_pieces`), a spread table one piece
        per rank it uses; `kinds`: the sharding type of each spread table."""
        kinds = kinds or {}
        allowed_kinds = dict(self.kinds)
        for t in range(len(pieces)):
            if t in kinds and t in allowed_kinds and kinds[t] not in allowed_kinds[t]:
                return f"table {t} may be {', '.join(allowed_kinds[t]) or 'no spread kind'}, the plan makes it " \
                       f"{kinds[t]}"
            if t in kinds and t not in allowed_kinds and self.kept_whole(t):
                return f"table {t} must stay whole on one device, the plan shards it {kinds[t]} over " \
                       f"{len(pieces[t])} devices"
            if self.kept_whole(t) and len(pieces[t]) > 1 and t not in kinds:
                return f"table {t} must stay whole, the plan splits it into {len(pieces[t])} pieces"
            narrow = dict(self.min_dim).get(t)
            if narrow is not None and t not in kinds and len(pieces[t]) > 1 and min(p.dim for p in pieces[t]) < narrow:
                return f"table {t} may be split into pieces of {narrow} columns or more, the plan has one of " \
                       f"{min(p.dim for p in pieces[t])}"
            ds = self.allowed(t)
            if ds is not None:
                off = [p.device for p in pieces[t] if p.device not in ds]
                if off:
                    return f"table {t} may use devices {list(ds)}, the plan puts a piece on device {off[0]}"
        for group in self.colocate:
            where = {p.device for t in group for p in pieces[t]}
            if len(where) > 1:
                return f"tables {list(group)} must share a device, the plan puts them on devices {sorted(where)}"
        return None
