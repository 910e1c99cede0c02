"""What a site folder holds, by name: the one place those names are spelled.

    site/
      .tim-report.json        the marker: the top-level entries tim-report wrote (publish.py)
      index.html, report.md   the index, per --format (tim_report.render)
      index.json              every run's row and the run view, always (index_json.py)
      assets/                 what every page shares (chart runtime, its script, the stylesheet), with html
      <run-id>/               one per batch: the --format files and the cache entry (cache.py)
"""

from __future__ import annotations

from ..catalogue.formats import ASSETS, FORMATS, SITE_FILES

__all__ = ["ASSETS", "ASSET_FILES", "CACHE_FILE", "INDEX_JSON", "MARKER", "RESERVED", "RUN_FILES", "STAGING_PREFIX", "run_files"]

MARKER = ".tim-report.json"
CACHE_FILE = ".tim-report-cache.json"
STAGING_PREFIX = ".tim-report-"
INDEX_JSON = "index.json"

# What a run folder holds, and nothing else: the files of every format, and the per-step cache entry.
RUN_FILES = frozenset(name for f in FORMATS.values() for name in f.run_files) | {CACHE_FILE}
# Names a run folder cannot take: the site's own files beside the run folders.
RESERVED = frozenset({MARKER, ASSETS, *SITE_FILES, *(name for f in FORMATS.values() for name in f.index_files)})
# What the assets folder holds, and nothing else (publish.py replaces it only then, as it does a run folder).
ASSET_FILES = frozenset(name for f in FORMATS.values() for name in f.assets)


def run_files(formats: tuple[str, ...]) -> tuple[str, ...]:
    """The files a run folder gets for these formats (the cache entry aside)."""
    return tuple(name for f in formats for name in FORMATS[f].run_files)
