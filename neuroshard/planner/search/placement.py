"""The greedy table-wise placement of DESIGN §8, for many states at every grid scale at once.

For each state (a list of post-split tables in greedy order) and each dim
limit `L` (one per grid scale), every table goes to the device with the
smallest current compute cost among those with memory room (each device
its own), that the table may use (`allow`, from the problem's constraints)
and with `dim_sum + dim <= L`; ties: least memory used, then lowest device
index. A device the keys pick but the table may not use sends the row to
the full scan, as one without memory room does.
A device's compute cost comes from its running accumulator
(`PlanScorer.project`/`cost_from_acc`). The result is bit-identical to
running each (state, scale) greedy on its own.

Why it is fast (a search at 1,000 tables x 128 devices runs ~11,000 greedy
steps, each over hundreds of (state, scale) rows):

* One row per *group* of scales. All scales of a state place tables
  alike until a dim limit binds: a row holds the scales `lo..hi` of one
  state that still agree, and picks under its largest limit. When the
  picked device breaks the dim limit of some of its scales, those (the
  lower limits) split off into a new row, a copy, which picks again under
  its own largest limit. A pick under a larger limit is the pick under a
  smaller one whenever it obeys the smaller (the feasible set only
  shrinks), so the groups are exact. Rows with no room anywhere fail as
  a whole and are dropped.
* Keys per table dim. A row keeps, per table dim v and device, the
  device's cost if its dim sum has room for v under the row's largest
  limit, else inf; a placement changes one device's keys. A step then
  takes the first device by the key of the table's dim and checks only
  its memory; the rare row where that device has no memory room (or no
  device has dim room) is scanned in full.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from neuroshard.planner.costs.features import ACC_DTYPE

# "No limit" for memory or dim budgets; small enough that adding sizes never wraps around.
NO_LIMIT = np.iinfo(np.int64).max // 4
# From this many devices on, rows keep per-dim device keys; below it a plain scan of every device
# is cheaper than keeping them (same result either way).
KEYS_FROM = 16
# From this many devices on, a row's keys are cut into blocks of BLOCK devices with each block's smallest key
# kept, so that a pick reads a block's minima and one block rather than every device (same result).
BLOCKS_FROM, BLOCK = 256, 32


@dataclass
class GreedyResult:
    """Placements of the rows that did not fail.

    `devices` [P, L]: the device of each table (greedy order) in live row l;
    `compute` [L, n] (float32 ms, 0 for empty) and `dims` [L, n] (dim sums)
    per live row; `row_of` [S, R]: the live row of state s at limit r, -1
    where that greedy failed.
    """

    devices: np.ndarray
    compute: np.ndarray
    dims: np.ndarray
    row_of: np.ndarray


def state_bytes(ndevices: int, ntables: int, nlimits: int, acc_width: int, ndims: int = 6) -> int:
    """Most memory one state can take in `run_greedy` (every scale its own row), bytes."""
    per_row = ndevices * (acc_width * np.dtype(ACC_DTYPE).itemsize + 8 + 8 + 4 + 4 * ndims) + 4 * ntables + 64
    return nlimits * per_row


def run_greedy(gid_order: np.ndarray, limits: np.ndarray, ndevices: int, cap, size: np.ndarray,
               dim: np.ndarray, proj: np.ndarray, acc0: np.ndarray, cost_from_acc,
               allow: np.ndarray | None = None) -> GreedyResult:
    """The greedy for S states (rows of `gid_order` [S, P], the tables in greedy order) at each of the
    R ascending dim `limits`. `cap`: memory per device (fp32 elements; one number, or [n]); `size`, `dim`,
    `proj`: per table id; `acc0`, `cost_from_acc`: the scorer's empty accumulator and head; `allow`
    [ids, n]: the devices each table id may use (None: all)."""
    return _Greedy(gid_order, limits, ndevices, cap, size, dim, proj, acc0, cost_from_acc, allow).run()


def pack_by_size(gid_order: np.ndarray, ndevices: int, cap, size: np.ndarray, dim: np.ndarray, proj: np.ndarray,
                 acc0: np.ndarray, cost_from_acc, allow: np.ndarray | None = None) -> GreedyResult:
    """Placements by memory alone for S states that the greedy could not place (rows of `gid_order` [S, P],
    each state's tables largest first: `size_order`): each table on the device with the most memory left
    ("spread") and, as a second row, with the least that still holds it ("tight", the tighter packing); a row
    that still fails is dropped. `row_of` [S, 2]. The other arguments as `run_greedy`'s."""
    caps = np.broadcast_to(np.asarray(cap, dtype=np.int64), (ndevices,))
    devices, compute, dims, row_of = [], [], [], np.full((len(gid_order), 2), -1, dtype=np.int64)
    for s, state in enumerate(gid_order):
        for r, tight in enumerate((False, True)):
            room, dev = caps.copy(), np.empty(len(state), dtype=np.int64)
            for j, g in enumerate(state.tolist()):
                fits = room >= size[g]
                if allow is not None:
                    fits &= allow[g]
                if not fits.any():
                    break
                left = np.where(fits, room - size[g], -1 if not tight else NO_LIMIT)
                dev[j] = int(np.argmin(left)) if tight else int(np.argmax(left))
                room[dev[j]] -= size[g]
            else:
                acc = np.tile(acc0, (ndevices, 1))
                np.add.at(acc, dev, proj[state])
                used = np.bincount(dev, minlength=ndevices) > 0
                compute.append(np.where(used, cost_from_acc(acc), 0.0).astype(ACC_DTYPE))
                dims.append(np.bincount(dev, weights=dim[state], minlength=ndevices).astype(np.int64))
                row_of[s, r] = len(devices)
                devices.append(dev)
    return GreedyResult(devices=np.array(devices, dtype=np.int64).T.reshape(gid_order.shape[1], len(devices)),
                        compute=np.array(compute, dtype=ACC_DTYPE).reshape(len(devices), ndevices),
                        dims=np.array(dims, dtype=np.int64).reshape(len(devices), ndevices), row_of=row_of)


def size_order(gids: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Each state's positions largest table first, ties by position [S, P]."""
    return np.argsort(-size[gids], axis=1, kind="stable")


def _first(cost: np.ndarray, rows: np.ndarray, mroom_of) -> tuple[np.ndarray, np.ndarray]:
    """(column, value) of the first entry of each row of `cost` [B, n] in the order (cost, most memory
    left, column); `cost` is scratch (it is changed). `rows` is arange(B); `mroom_of(rows)`: memory left of
    those rows, fetched only on ties."""
    col = cost.argmin(axis=1)
    width = cost.shape[1]
    flat, at = cost.reshape(-1), rows * width
    best = flat.take(at + col)
    if width > 1:
        # a tie: the row's next smallest entry equals its smallest (two argmins are cheaper than counting
        # the entries equal to the minimum)
        flat[at + col] = np.inf
        tie = ((flat.take(at + cost.argmin(axis=1)) == best) & (best < np.inf)).nonzero()[0]
        if len(tie):
            cost[tie, col[tie]] = best[tie]
            col[tie] = np.where(cost[tie] == best[tie, None], mroom_of(tie), -1).argmax(axis=1)
    return col, best


class _Greedy:
    """One batched greedy run. Per row (a group of scales of one state) and device: the compute
    cost, memory left, dim sum and accumulator, and per table dim v the device's key for a table
    of dim v (its cost, or inf when its dim sum has no room for v under the row's largest limit).
    Arrays are allocated once for the most rows; `*_flat` are flat views of them, `accv` a view of
    the accumulators with one element per device (a row of A floats), so that a device's
    accumulator is gathered and stored in one move."""

    def __init__(self, gid_order, limits, n, cap, size, dim, proj, acc0, head, allow=None):
        S, P = gid_order.shape
        self.allow = allow
        R = len(limits)
        self.n, self.P, self.R, self.S = n, P, R, S
        self.limits = np.asarray(limits, dtype=np.int64)
        self.cap = np.broadcast_to(np.asarray(cap, dtype=np.int64), (n,))
        self.proj, self.head, self.acc0 = proj, head, acc0
        A = len(acc0)
        self.row_dtype = np.dtype((np.void, A * np.dtype(ACC_DTYPE).itemsize))
        self.projv = np.ascontiguousarray(proj, dtype=ACC_DTYPE).view(self.row_dtype).ravel()
        # per step j and state s: the table id, its size, the index of its dim in dims_u, its dim
        gid = np.ascontiguousarray(gid_order.T)
        self.dims_u, vi = np.unique(dim[gid], return_inverse=True)
        self.info = np.stack([gid, size[gid], vi.reshape(gid.shape), dim[gid]], axis=1)  # [P, 4, S]
        V = self.V = len(self.dims_u)

        C = S * R  # most rows: every scale of every state on its own (pages are touched only when used)
        self.ar = np.arange(C, dtype=np.int64)
        self.state = np.zeros(C, dtype=np.int64)
        self.state[:S] = np.arange(S)
        self.lo = np.zeros(C, dtype=np.int64)  # the row's scales are lo..hi
        self.hi = np.full(C, R - 1, dtype=np.int64)
        self.lim_lo = np.full(C, self.limits[0], dtype=np.int64)
        self.lim_hi = np.full(C, self.limits[-1], dtype=np.int64)
        self.failed = np.zeros(C, dtype=bool)
        self.cost = np.zeros((C, n), dtype=ACC_DTYPE)  # compute ms, 0 while empty
        self.mroom = np.empty((C, n), dtype=np.int64)  # memory left (fp32 elements)
        self.mroom[:] = self.cap
        self.dsum = np.zeros((C, n), dtype=np.int64)  # dim sums
        # blocks of keys: nb of `bs` devices, the last one padded with inf
        self.bs = BLOCK if n >= BLOCKS_FROM else n
        self.nb = -(-n // self.bs)
        npad = self.npad = self.nb * self.bs
        self.key = np.empty((C * V if n >= KEYS_FROM else 0, npad), dtype=ACC_DTYPE)  # row b, dim v at b * V + v
        self.key2 = self.key.reshape(-1, self.bs)  # key row k, block i at k * nb + i
        # each block's smallest key (with more than one block)
        self.bmin = np.empty((len(self.key) if self.nb > 1 else 0, self.nb), dtype=ACC_DTYPE)
        self.bmin_flat = self.bmin.ravel()
        self.acc = np.empty((C * n, A), dtype=ACC_DTYPE)  # row b, device d at b * n + d
        self.acc[:S * n] = acc0
        self.accv = self.acc.view(self.row_dtype).ravel()
        self.hist = np.zeros((C, P), dtype=np.int32)  # device chosen at each step, per row (a split copies a row)
        self.cost_flat, self.mroom_flat, self.dsum_flat = self.cost.ravel(), self.mroom.ravel(), self.dsum.ravel()
        self.key_flat = self.key.ravel()
        self.base = self.ar * n  # flat index of device 0 of each row
        self.key_row = self.ar * V  # first key row of each row
        self.key_rows = self.key_row[:, None] + np.arange(V)  # the key row of each row and dim [C, V]
        self.key_at = self.key_rows * npad  # the flat index of device 0 in each of them
        self.key_blocks = self.key_rows * self.nb  # the index of their first block in `key2`
        self.block_at = np.arange(C * V if self.nb > 1 else 0, dtype=np.int64) * self.bs  # a block's first key
        self.rows = S
        self.n_failed = 0
        self.keys = n >= KEYS_FROM
        self.start = self._prefill()
        self._refresh(np.arange(S))

    def _prefill(self) -> int:
        """Place the first tables of every state while the choice is forced, all steps at once; how many.

        While some devices are empty (cost 0) and every other device's cost is above 0, a table goes to an
        empty device: the one with the most memory, then the lowest index (the order `(cost, most memory
        left, index)`), which the j-th table is, for each state, the j-th device in order of memory (ties by
        index) when that device may hold it (memory, its dim within every scale's limit, `allow`). The
        steps run this way give the same accumulators, costs and choices as running them one by one.
        """
        n, S = self.n, self.S
        J = min(n, self.P)
        if J == 0 or S == 0:
            return 0
        order = np.argsort(-self.cap, kind="stable")[:J]  # empty devices in the order of choice
        g, size, _, dm = (x[:J] for x in self.info.transpose(1, 0, 2))  # [J, S] each
        acc = np.empty((J * S, len(self.acc0)), dtype=ACC_DTYPE)
        acc[:] = self.acc0
        acc += self.proj[g.ravel()]
        cost = self.head(acc.copy(), overwrite=True).reshape(J, S)
        ok = (size <= self.cap[order][:, None]) & (dm <= self.limits[0])
        if self.allow is not None:
            ok &= self.allow[g, order[:, None]]
        first_bad = np.flatnonzero(~ok.all(axis=1))
        # step j needs every earlier table's device above cost 0
        not_positive = np.flatnonzero(~(cost > 0).all(axis=1))
        j0 = min(first_bad[0] if len(first_bad) else J, not_positive[0] + 1 if len(not_positive) else J)
        if j0 == 0:
            return 0
        dev = order[:j0]
        flat = (np.arange(S)[None, :] * n + dev[:, None]).ravel()  # step-major, as `acc` and `cost`
        self.acc[flat] = acc[:j0 * S]
        self.cost_flat[flat] = cost[:j0].ravel()
        self.mroom_flat[flat] = (self.cap[dev][:, None] - size[:j0]).ravel()
        self.dsum_flat[flat] = dm[:j0].ravel()
        self.hist[:S, :j0] = dev
        return int(j0)

    def _refresh(self, rows: np.ndarray) -> None:
        """Keys of `rows` from scratch: new rows, or a new dim limit."""
        if not self.keys:
            return
        room = (self.lim_hi[rows][:, None] - self.dims_u)[:, :, None]  # [K, V, 1]
        key = np.full((len(rows), self.V, self.npad), np.inf, dtype=ACC_DTYPE)
        key[:, :, :self.n] = np.where(self.dsum[rows][:, None, :] <= room, self.cost[rows][:, None, :], np.inf)
        at = self.key_rows[rows].ravel()
        self.key[at] = key.reshape(-1, self.npad)
        if self.nb > 1:
            self.bmin[at] = key.reshape(len(at), self.nb, self.bs).min(axis=2)

    # ------------------------------------------------------------------ picking a device

    def _scan(self, rows, size, dm, lim, g) -> tuple[np.ndarray, np.ndarray]:
        """(device, nothing fits) for `rows` (indices or a slice) placing table ids `g`: every device looked
        at."""
        mroom, dsum = self.mroom[rows], self.dsum[rows]
        fits = mroom >= size[:, None]
        fits &= dsum <= (lim - dm)[:, None]
        if self.allow is not None:
            fits &= self.allow[g]
        key = np.where(fits, self.cost[rows], np.inf)
        dev, best = _first(key, self.ar[:len(size)], lambda t: mroom[t])
        return dev, best == np.inf

    def _pick(self, vi: np.ndarray, size, dm, g) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """(device, nothing fits or None, flat index of the device) for every row placing table ids `g`:
        the first device by the key of the table's dim (under the row's largest dim limit) if it has memory
        room and the table may use it, else from a full scan of the row."""
        B = self.rows
        if not self.keys:
            dev, none = self._scan(slice(0, B), size, dm, self.lim_hi[:B], g)
            return dev, none, self.base[:B] + dev
        at = self.key_row[:B] + vi
        if self.nb > 1:
            dev, best = self._pick_blocks(at)
        else:
            dev, best = _first(self.key.take(at, axis=0), self.ar[:B], lambda t: self.mroom[t])
        fi = self.base[:B] + dev
        bad = self.mroom_flat.take(fi) < size  # no memory room there
        bad |= best == np.inf  # no dim room anywhere
        if self.allow is not None:
            bad |= ~self.allow[g, dev]  # a device the table may not use
        none = None
        if bad.any():
            bad = bad.nonzero()[0]
            none = np.zeros(B, dtype=bool)
            dev[bad], none[bad] = self._scan(bad, size[bad], dm[bad], self.lim_hi[bad], g[bad])
            fi[bad] = self.base[bad] + dev[bad]
        return dev, none, fi

    def _pick_blocks(self, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`_first` over the key rows `at` of the B rows, from the blocks' minima: the block with the smallest,
        then the smallest key in it; a row with another block or device at that key (a tie, decided by memory
        left) is decided on its whole key row."""
        ar, bs = self.ar[:len(at)], self.bs
        kb = self.bmin.take(at, axis=0)
        kc = kb.argmin(axis=1)
        best = kb[ar, kc]
        blk = self.key2.take(at * self.nb + kc, axis=0)
        ic = blk.argmin(axis=1)
        # the next smallest block minimum and the next smallest key in the block: equal to the smallest is a tie
        kb[ar, kc] = np.inf
        blk[ar, ic] = np.inf
        tie = (kb[ar, kb.argmin(axis=1)] == best) | (blk[ar, blk.argmin(axis=1)] == best)
        dev = kc * bs + ic
        if tie.any():
            tie = (tie & (best < np.inf)).nonzero()[0]
            if len(tie):
                key = self.key.take(at[tie], axis=0)[:, :self.n]
                dev[tie] = np.where(key == best[tie, None], self.mroom[tie], -1).argmax(axis=1)
        return dev, best

    def _set_keys(self, B: int, dev: np.ndarray, need: np.ndarray, cost: np.ndarray) -> None:
        """The keys of each row's placed device `dev` (its new `cost` and dim sum `need`), and with blocks their
        blocks' minima, looked for again (the placed device mostly held its block's minimum, which then rose)."""
        room = (self.lim_hi[:B] - need)[:, None] >= self.dims_u
        new = np.where(room, cost[:, None], np.inf)  # [B, V]
        self.key_flat[self.key_at[:B] + dev[:, None]] = new
        if self.nb == 1:
            return
        blocks = (self.key_blocks[:B] + (dev // self.bs)[:, None]).ravel()
        keys = self.key2.take(blocks, axis=0)
        self.bmin_flat[blocks] = keys.reshape(-1).take(self.block_at[:len(blocks)] + keys.argmin(axis=1))

    # ------------------------------------------------------------------ groups of scales

    def _split(self, j: int, rows: np.ndarray, need: np.ndarray) -> np.ndarray:
        """Split off, from each of `rows`, the scales whose limit is below `need`; the new rows' indices."""
        n = self.n
        k = np.searchsorted(self.limits, need, side="left") - 1  # each row's last scale that cannot take it
        new = np.arange(self.rows, self.rows + len(rows))
        self.rows += len(rows)
        for arr in (self.state, self.cost, self.mroom, self.dsum):
            arr[new] = arr[rows]
        self.acc.reshape(-1, n, self.acc.shape[1])[new] = self.acc.reshape(-1, n, self.acc.shape[1])[rows]
        self.hist[new, :j] = self.hist[rows, :j]
        self.failed[new] = False
        lo = self.lo[rows]
        self.lo[new], self.hi[new] = lo, k
        self.lim_lo[new], self.lim_hi[new] = self.limits[lo], self.limits[k]
        self.lo[rows] = k + 1
        self.lim_lo[rows] = self.limits[k + 1]
        self._refresh(new)
        return new

    def _park(self, rows: np.ndarray) -> None:
        """Failed rows: unlimited room, so they never fail or split again; dropped later."""
        self.failed[rows] = True
        self.n_failed += len(rows)
        self.mroom[rows] = NO_LIMIT
        self.lim_lo[rows] = self.lim_hi[rows] = NO_LIMIT
        self._refresh(rows)

    def _compact(self) -> None:
        keep = (~self.failed[:self.rows]).nonzero()[0]
        k = len(keep)
        for arr in (self.state, self.lo, self.hi, self.lim_lo, self.lim_hi, self.failed, self.cost, self.mroom,
                    self.dsum):
            arr[:k] = arr[keep]
        moved = [(self.acc, self.n)] + ([(self.key, self.V)] if self.keys else []) + (
            [(self.bmin, self.V)] if len(self.bmin) else [])
        for arr, width in moved:
            per_row = arr.reshape(-1, width, arr.shape[1])
            per_row[:k] = per_row[keep]
        self.hist[:k] = self.hist[keep]
        self.rows, self.n_failed = k, 0

    # ------------------------------------------------------------------ the run

    def run(self) -> GreedyResult:
        for j in range(self.start, self.P):
            if self.rows == 0:
                break
            self._step(j)
        return self._result()

    def _step(self, j: int) -> None:
        B = self.rows
        g, size, vi, dm = self.info[j].take(self.state[:B], axis=1)
        dev, none, fi = self._pick(vi, size, dm, g)
        if none is not None and none.any():
            self._park(none.nonzero()[0])
        need = self.dsum_flat.take(fi) + dm
        split = (need > self.lim_lo[:B]).nonzero()[0]
        while len(split):  # some scales of these rows cannot follow: they go on as rows of their own
            new = self._split(j, split, need[split])
            g_new, size_new, _, dm_new = self.info[j].take(self.state[new], axis=1)
            dev_new, none_new = self._scan(new, size_new, dm_new, self.lim_hi[new], g_new)
            if none_new.any():
                self._park(new[none_new])
            fi_new = self.base[new] + dev_new
            need_new = self.dsum_flat.take(fi_new) + dm_new
            g, size = np.concatenate([g, g_new]), np.concatenate([size, size_new])
            dev, need = np.concatenate([dev, dev_new]), np.concatenate([need, need_new])
            fi = np.concatenate([fi, fi_new])
            split = new[need_new > self.lim_lo[new]]
        B = self.rows
        a = self.accv.take(fi).view(ACC_DTYPE).reshape(B, -1)
        a += self.projv.take(g).view(ACC_DTYPE).reshape(B, -1)
        self.accv[fi] = a.view(self.row_dtype).ravel()
        cost = self.head(a, overwrite=True)
        self.cost_flat[fi] = cost
        self.mroom_flat[fi] -= size
        self.dsum_flat[fi] = need
        if self.keys:  # the placed device's key for each table dim
            self._set_keys(B, dev, need, cost)
        self.hist[:B, j] = dev
        if self.n_failed and 3 * self.n_failed >= B:  # drop failed rows once they are a third
            self._compact()

    def _result(self) -> GreedyResult:
        live = (~self.failed[:self.rows]).nonzero()[0]
        row_of = np.full((self.S, self.R), -1, dtype=np.int64)
        for i, b in enumerate(live.tolist()):
            row_of[self.state[b], self.lo[b]:self.hi[b] + 1] = i
        return GreedyResult(devices=self.hist[live].T, compute=self.cost[live], dims=self.dsum[live], row_of=row_of)
