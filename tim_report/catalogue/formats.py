"""The output formats: what each writes and which module renders it.

A format is a name on the command line (`--format`), the files it adds to a run folder and to the site's
root, and the module holding its renderer (`tim_report.render`'s protocol),
imported only when the format is asked for, so a markdown-only build never loads Altair or Jinja2.
Adding a format is its renderer module and one entry here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Format:
    name: str  # as `--format` spells it
    module: str  # tim_report.render.<module> defines RENDERER
    run_files: tuple[str, ...]  # what it writes into each run folder
    index_files: tuple[str, ...]  # into the site's root
    help: str
    assets: tuple[str, ...] = ()  # shared by every page of a site, in its ASSETS folder (not with --self-contained)


FORMATS: dict[str, Format] = {f.name: f for f in (
    # samples.js: the sampled sequences' token rows, one copy that the page draws its tables from and scripts read
    Format("html", "html", ("index.html", "samples.js"), ("index.html",), "the pages", ("vega.js", "tim.js", "style.css")),
    Format("md", "markdown", ("report.md",), ("report.md",), "GitHub-flavoured markdown for a PR comment"),
    Format("json", "json", ("summary.json", "samples.js"), (), "every number, for scripts"),
)}

# The site's own files beside the run folders, whatever the formats: index.json is what the cache, `check
# --history` and `watch` read back, so every build writes it (tim_report.site.index_json).
SITE_FILES = ("index.json",)

# The folder at a site's root (and a comparison's) holding one copy of what every page shares: the chart runtime,
# the script that draws the charts, the stylesheet. Each page links them by a relative path.
ASSETS = "assets"
