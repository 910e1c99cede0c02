"""What a site folder holds, by name: the one place those names are spelled.

    site/
      .tim-report.json        the marker: the top-level entries tim-report wrote (publish.py)
      .tim-report.lock        the output lock: held around the marker's update and the moves (publish.py)
      .tim-report-staging-*/  a build's staging folder while it runs, proven live by the lock inside it (publish.py)
      index.html, report.md   the index, per --format (tim_report.render)
      index.json              every run's row and the run view, always (index_json.py)
      assets/                 what every page shares (chart runtime, its script, the stylesheet), with html
      <run-id>/               one per batch: the --format files and the cache entry (cache.py)
"""

from __future__ import annotations

import re

from ..catalogue.formats import ASSETS, FORMATS, SITE_FILES

__all__ = ["ASSETS", "ASSET_FILES", "CACHE_FILE", "INDEX_FILES", "INDEX_JSON", "MARKER", "OUTPUT_LOCK", "RESERVED",
           "RUN_FILES", "STAGING_LOCK", "STAGING_PREFIX", "is_tool_entry", "run_files"]

MARKER = ".tim-report.json"
CACHE_FILE = ".tim-report-cache.json"
OUTPUT_LOCK = ".tim-report.lock"
STAGING_PREFIX = ".tim-report-staging-"
STAGING_LOCK = ".tim-report-staging.lock"  # inside a staging folder; its content is the folder's token
INDEX_JSON = "index.json"

# What a run folder holds, and nothing else: the files of every format, and the per-step cache entry.
RUN_FILES = frozenset(name for f in FORMATS.values() for name in f.run_files) | {CACHE_FILE}
# Names a run folder cannot take: the site's own files beside the run folders.
INDEX_FILES = frozenset({*SITE_FILES, *(name for f in FORMATS.values() for name in f.index_files)})
RESERVED = frozenset({MARKER, OUTPUT_LOCK, ASSETS, *INDEX_FILES})
# What the assets folder holds, and nothing else (publish.py replaces it only then, as it does a run folder).
ASSET_FILES = frozenset(name for f in FORMATS.values() for name in f.assets)


# The marker's own temporary file while a build replaces it (safe_fs.replace_file: pid and 64 random bits): a build
# racing into the same fresh folder sees it before the marker exists, and must not take it for a stranger's file.
MARKER_TMP = re.compile(re.escape(MARKER) + r"\.\d+\.[0-9a-f]{16}\.tmp")


def is_tool_entry(name: str) -> bool:
    """An entry of a site folder that tim-report keeps for itself and never lists in the marker."""
    return name == OUTPUT_LOCK or name.startswith(STAGING_PREFIX) or MARKER_TMP.fullmatch(name) is not None


def run_files(formats: tuple[str, ...]) -> tuple[str, ...]:
    """The files a run folder gets for these formats (the cache entry aside)."""
    return tuple(name for f in formats for name in FORMATS[f].run_files)
