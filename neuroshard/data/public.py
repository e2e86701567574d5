"""The public DLRM dataset file (`fbgemm_t856_bs65536.pt[.gz]`) into per-table lookups and stats."""

from __future__ import annotations

import torch

from neuroshard.data.stats import INT32_MAX, table_locality


def compact(t: torch.Tensor, limit: int) -> torch.Tensor:
    """A fresh, contiguous copy of `t`, int32 when every value is <= `limit` < 2**31.

    Copies so that saving one table never drags the storage of a larger
    tensor it was sliced from; int32 halves the memory of the lookups.
    """
    if limit <= INT32_MAX:
        return t.to(torch.int32, copy=True).contiguous()
    return t.to(torch.int64, copy=True).contiguous()


def process_public(indices: torch.Tensor, offsets: torch.Tensor, lengths: torch.Tensor,
                   path: str = "<public file>", progress: bool = True):
    """Split the public layout into per-table lookups and compute each table's stats.

    `indices`: flat lookups of all tables one after another; `offsets`:
    length T*B+1; `lengths`: [T, B] (as returned by `formats.read_public_dlrm`,
    memory-mapped). Works table by table on slice views, so the only large
    extra memory is the compact (int32 where possible) copy of the lookups
    that goes into `data.pt`.
    Returns (configs, localities, per-table indices, per-table offsets from 0).
    """
    from tqdm import tqdm

    from neuroshard.formats.dataset import check_public_table

    num_tables, batch = lengths.shape
    configs, localities, out_idx, out_off = [], [], [], []
    for t in tqdm(range(num_tables), desc="tables", unit="table", disable=not progress):
        idx, off = check_public_table(path, t, indices, offsets, lengths)
        loc = table_locality(idx)
        configs.append(loc.config(batch))
        localities.append(loc)
        out_idx.append(compact(idx, loc.max_index))
        out_off.append(compact(off, idx.numel()))
        del idx, off
    return configs, localities, out_idx, out_off


