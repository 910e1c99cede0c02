"""The service layer: what each command does, for the command line and the Python API alike.

    build(paths, out, BuildOptions)        the site: one folder per batch and the index (build.py)
    compare(before, after, ...)            two batches compared; write_compare(comparison, out) (compare.py)
    check(paths, LoadOptions, CheckOptions) each batch against limits, findings and the run's band (check.py)
    executors / ray_executor               where each step's work runs: here, --jobs processes, Ray tasks

`cli/` is Click wiring over these functions and `api.py` the notebook face of the same calls, so the two
front doors cannot disagree. Import the submodules: this package imports nothing at start-up.
"""
