"""The records every stage speaks, split by domain; each module imports only the ones above it in this list.

* `errors`: the package's errors, each naming what was wrong in one line;
* `codec`: the one JSON codec of the records (`Record`, `json_field`);
* `tables`: table statistics (`TableConfig`), tasks, a task's tables (`ShardTable`), sizes;
* `plan`: a sharding plan and its algebra (column splits, pieces, placement checks);
* `costs`: a plan's per-device cost breakdown, its spread, the models' own error;
* `records`: a plan record (one algorithm's plan for one task, simulated and measured) and what a
  hardware measurement of a plan reports.

Nothing here imports torch. Units: sizes in GB (2**30 bytes), times in ms.
"""
