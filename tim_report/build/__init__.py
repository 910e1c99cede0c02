"""The pipeline: load → analyze → render → write, for `build` (a site) and `compare` (a comparison folder).

    build(paths, out, opts)             one folder per batch plus the index, all or nothing
    write_compare(comparison, out)      index.html, compare.json, compare.md
    executors.analyze_all               the per-batch work, in-process or in `--jobs` processes
"""

from .pipeline import FORMATS, BuildOptions, build, safe_run_id, unique_ids, write_compare

__all__ = ["FORMATS", "BuildOptions", "build", "safe_run_id", "unique_ids", "write_compare"]
