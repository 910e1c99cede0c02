"""The index's sections as view models (render/tables.py): each table's title, intro sentence, columns and cells,
built once from the index summary and shown alike by the HTML index and report.md.

No markup and no statistics here: numbers come from the index summary (analysis.run_index.index_summary) and are
only formatted. A new index table is one function here returning a `Section`, and its place in `sections()`: both formats show
every section that list returns, in its order.
"""

from __future__ import annotations

from ..catalogue import findings
from ..catalogue import metrics as catalogue
from ..catalogue import staleness as lag_words
from ..catalogue.numbers import fixed, fmt, pct
from ..model import version_int
from .tables import HTML, MARKDOWN, Cell, Column, Row, Section, Table, plural, text
from .views import flagged_note

REGIME_MARK = {"identical": "✅", "numerical_noise": "✅", "staleness": "✅", "elevated": "⚠️", "systematic": "❌"}
WATCHED = "⚠️"  # a staleness run or step whose lag is climbing above its own history: not named yet, not nothing
UNPAIRED_SHOWN = 20  # run ids the unpaired warning names
PROBLEMS_TIP = "tokens excluded for NaN, inf or positive log-probs / input values the reader had to repair"


def runs_table(index: dict) -> Table:
    """One row per run. HTML puts model and device, and the engine pair, in one cell each (on two lines, kept whole);
    markdown, a PR comment's table, keeps ten columns: health, run and verdict first, then the model, the engines with
    their dtypes, the step, the tokens and the three headline numbers (the rest are in index.html and index.json)."""
    metrics = [catalogue.metric(k) for k in catalogue.INDEX]
    html, md = frozenset({HTML}), frozenset({MARKDOWN})
    # at phone width the HTML keeps the run, its verdict and the three headline numbers (catalogue.INDEX_NARROW)
    columns = (Column("health", wide_only=True), Column("run"), Column("verdict", formats=html),
               Column("verdict", formats=md), Column("model, device", formats=html, wide_only=True),
               Column("rollout → trainer", formats=html, wide_only=True), Column("model", formats=md),
               Column("rollout → trainer", formats=md),
               Column("step", numeric=True, wide_only=True), Column("tokens", numeric=True, wide_only=True),
               *[Column(m.name, numeric=True, wrap=True, wide_only=m.key not in catalogue.INDEX_NARROW,
                        formats=frozenset({HTML, MARKDOWN}) if m.key in catalogue.INDEX_NARROW else html) for m in metrics],
               Column("routing: train / corr. / quar.", wrap=True, wide_only=True, formats=html))
    rows = []
    for r in index["runs"]:
        rt = r["routing"]
        verdict = (r["regime"] or "—").replace("_", " ")
        climbing = (r.get("lag_reading") or {}).get("status") == "climbing" and not r.get("findings")
        cause = lag_words.climbing_short(r["lag_reading"]) if climbing else lead_cause(r)
        problems = r.get("excluded_tokens") or r.get("input_problems")
        warn = (f"⚠ {fmt(r.get('excluded_tokens'))} excluded"
                + (f", {fmt(r['input_problems'])} repaired" if r.get("input_problems") else "")) if problems else None
        pair = (f"{r['rollout_engine']} {r['rollout_dtype']}", f"{r['trainer_engine']} {r['trainer_dtype']}")
        rows.append(Row((
            Cell(health=r["health"]), Cell(r["id"], link=r["id"], twin=True, cls="id"),
            Cell(verdict, cls="verdict-cell", tip=r.get("glance"), note=cause, note_below=True),
            Cell(verdict, icon=WATCHED if climbing else REGIME_MARK.get(r["regime"], "➖"), note=f"({cause})" if cause else None),
            Cell(r["model"] or "unknown model", note=r["device"], note_below=True),
            Cell(keep=pair), Cell(text(r["model"]), note=f"· {r['device']}" if r["device"] else None), Cell(keep=pair),
            Cell(text(r["step"])),
            Cell(fmt(r["tokens"]), warn=warn, tip=PROBLEMS_TIP if warn else None),
            *[Cell(m.write(r[m.key])) for m in metrics],
            Cell("fix the bug first", icon="❌", style="route quarantine") if r["blocked_by_bug"] else
            Cell(f"{fmt(rt.get('train'))} / {fmt(rt.get('train_with_correction'))} / {fmt(rt.get('quarantine'))}"),
        )))
    return Table(columns, tuple(rows), cls="runs")


def lead_cause(row: dict) -> str | None:
    """The cause beside a run's verdict: its leading finding's short name ("off-by-one"), as the run's glance leads with it."""
    lead = next(iter(row.get("findings") or []), None)
    if lead is None:
        return None
    entry = findings.FINDINGS.get(lead)
    return (entry.short if entry is not None and entry.short else None) or lead.replace("_", " ")


def unreadable_table(index: dict) -> Table:
    """The steps that could not be read, each with why (the reason may quote the file: not our words)."""
    columns = (Column(""), Column("run"), Column("step", numeric=True), Column("path"), Column("why"))
    rows = tuple(Row((Cell(icon="❌"), Cell(u["id"]), Cell(text(u["step"])), Cell(u["path"], long=True),
                      Cell(u["reason"], long=True)), cls="unreadable") for u in index.get("unreadable") or [])
    return Table(columns, rows)


def pairs_section(index: dict) -> Section | None:
    """The engine pairs, aggregated over their runs (none for a single run)."""
    if len(index["runs"]) < 2:
        return None
    # at phone width (420 px) the pair, its mean ESS and mean |δ| stay, unscrolled; the rest on a wider screen
    narrow = {"mean ESS", "mean |δ|"}
    columns = (Column("health", wide_only=True), Column("rollout"), Column("trainer"),
               *[Column(h, numeric=True, wrap=True, wide_only=h not in narrow) for h in (
                   "runs", "mean ESS", "mean clipped", "mean Σδ", "mean |δ|", "worst max |δ|", "tokens")])
    rows = tuple(Row((
        Cell(health=p["health"]), Cell(text(f"{p['rollout_engine']} {p['rollout_dtype']}")),
        Cell(text(f"{p['trainer_engine']} {p['trainer_dtype']}")),
        Cell(fmt(p["count"]), tip=", ".join(p["runs"]), note=flagged_note(p).strip() or None),
        Cell(fixed(p["mean_ess"], 4)), Cell(pct(p["mean_clipped"])), Cell(fmt(p["mean_seq_log_ratio"])),
        Cell(fmt(p["mean_abs_delta"])), Cell(fmt(p["worst_abs_delta_max"])), Cell(fmt(p["tokens"])),
    )) for p in index["engine_pairs"])
    unpaired = index.get("unpaired_runs") or []
    warning: tuple[tuple[str, bool], ...] = ()
    if unpaired:
        n = len(unpaired)
        more = f" and {n - UNPAIRED_SHOWN} more" if n > UNPAIRED_SHOWN else ""
        warning = ((f"{plural(n, 'run')} (", True), (", ".join(unpaired[:UNPAIRED_SHOWN]), False),
                   (f"{more}) {'do' if n != 1 else 'does'} not name {'their' if n != 1 else 'its'} engines and dtypes, "
                    f"so {'they are' if n != 1 else 'it is'} not averaged with anything. Name them with "
                    "`--meta rollout_engine=vllm --meta rollout_dtype=bf16 --meta trainer_engine=fsdp "
                    "--meta trainer_dtype=fp32`.", True))
    return Section("engine-pairs", "engine pairs", "Engine pairs",
                   "Runs with the same rollout engine and dtype and the same trainer engine and dtype, aggregated over "
                   "the runs whose mismatch is the engines' own: the mean of ESS, phantom clipping, mean Σδ and mean |δ|; "
                   "the worst max |δ|; all their tokens. A run with a warn or error finding (a bug, not the engines' "
                   "health) is counted beside them (+ N with a finding), not averaged. The colour is the mean ESS's.",
                   (Table(columns, rows, cls="pairs"),) if rows else (), warning)


def precision_section(index: dict) -> Section | None:
    p = index.get("precision")
    if not p:
        return None
    columns = (Column("rollout \\ trainer"), *[Column(d, user=True) for d in p["trainer_dtypes"]])
    rows = tuple(Row((Cell(ro, head=True), *[
        Cell("—") if c is None else
        Cell(f"median |δ| {fmt(c['mean_abs_delta_median'])} · KL {fmt(c['mean_kl_k3'])} · {plural(c['count'], 'run')}"
             + flagged_note(c), health=c["health"]) if c["count"] else
        Cell(f"{plural(len(c['with_findings']), 'run')}, each with a finding") for c in line]))
        for ro, line in zip(p["rollout_dtypes"], p["cells"]))
    return Section("precision", "precision matrix", "Precision matrix",
                   "Rollout dtype (rows) × trainer dtype (columns): the mean of median |δ| (nats) and of KL k3 over the "
                   "runs whose mismatch is the engines' own, with their number (runs with a warn or error finding are "
                   "counted beside, not averaged); the colour is the mean ESS's. — marks a pair with no run.",
                   (Table(columns, rows, cls="precision"),))


def trend_section(index: dict) -> Section | None:
    """The steps' table (HTML draws its columns as charts), its intro, and the change points or why there are none."""
    tr = index.get("trend")
    if not tr:
        return None
    n = tr["unstepped"]
    intro = f"{fmt(tr['steps'])} steps" + (f" ({plural(n, 'run')} without a step left out)" if n else "") + "."
    metrics = tr["metrics"]
    columns = (Column("step"), Column("run"), *[Column(m["name"], numeric=True) for m in metrics])
    rows = tuple(Row((Cell(text(x["step"])), Cell(x["run"]),
                      *[Cell(catalogue.metric(m["key"]).write(x[m["key"]])) for m in metrics])) for x in tr["rows"])
    low = tr["steps"] < tr["min_steps_for_change"]
    quiet = (f"Change points need at least {tr['min_steps_for_change']} steps (a level is at least "
             f"{tr['min_steps_for_change'] // 2} steps long)." if low else
             "No change point: every metric keeps its level over the run (within its own step-to-step noise).")
    return Section("trend", "over training steps", "Over training steps", intro, (Table(columns, rows),),
                   changes=tuple(tr.get("change_steps") or ()), quiet="" if tr.get("change_steps") else quiet,
                   quiet_small=low)


def sweep_section(index: dict) -> Section | None:
    sweeps = index.get("sweep") or []
    if not sweeps:
        return None
    columns = (*[Column(h, numeric=True) for h in ("max new tokens", "mean length", "sequences", "mean |Σδ|",
                                                   "KL k3 per token", "KL per sequence")],
               Column("runs", formats=frozenset({HTML})))
    tables = []
    for s in sweeps:
        rows = tuple(Row((*[Cell(fmt(p[k])) for k in ("max_new_tokens", "mean_length", "sequences", "abs_sum", "kl_k3",
                                                      "kl_seq")], Cell(links=tuple(p["runs"])))) for p in s["points"])
        after = tuple(f"{name} grows {s[k]['reading'] if s[k] else '— (a value of 0)'}."
                      for name, k in (("|Σδ|", "abs_sum"), ("KL per sequence", "kl_seq")))
        tables.append(Table(columns, rows, title=f"{s['pair'][0]} {s['pair'][1]} → {s['pair'][2]} {s['pair'][3]}",
                            after=after))
    return Section("sweep", "length sweep", "Length sweep",
                   "The same engine pair captured at several generation lengths (`capture --max-new-tokens 128,512,2048`): "
                   "how the mismatch grows with the mean sequence length, fitted as a power of it on the log-log scale.",
                   tuple(tables))


def envs_section(index: dict) -> Section | None:
    envs = index.get("envs")
    if not envs:
        return None
    columns = (Column("environment"), *[Column(h, numeric=True) for h in ("steps", "first", "last", "last ÷ first",
                                                                          "worst")])
    rows = tuple(Row((Cell(e["env"], cls="name"), Cell(fmt(e["steps"])),
                      Cell(fmt(e["first"]), note=f"(step {e['first_step']})"),
                      Cell(fmt(e["last"]), note=f"(step {e['last_step']})"), Cell(fmt(e["last_over_first"], 2)),
                      Cell(fmt(e["worst"]), link=e["worst_run"], note=f"(step {e['worst_step']})"))) for e in envs)
    return Section("envs", "by environment", "By environment over the run",
                   "KL k3 of each environment the steps name (prime-rl's `env_name`; what it logs as "
                   "`mismatch_kl/{env}`), worst first.", (Table(columns, rows),))


def _lag_order(key: str) -> tuple:
    return (key == "unknown", version_int(key) or 0)


def lags_section(index: dict) -> Section | None:
    """The lag mix and the staleness share of every step that names its weight versions, in step order."""
    runs = sorted((r for r in index["runs"] if r.get("lag_mix")),
                  key=lambda r: (r.get("step") is None, r.get("step") or 0, r["id"]))
    if not runs:
        return None
    columns = (Column("step", numeric=True), Column("run"), Column("lag mix (share of tokens)"),
               Column("staleness share", numeric=True), Column("KL k3 at lag 0", numeric=True),
               Column("KL k3 by lag ≥ 1", wrap=True))
    rows = []
    for r in runs:
        lags = sorted(r["lag_mix"], key=_lag_order)
        older = [k for k in lags if k != "0"]
        rows.append(Row((Cell(text(r.get("step"))), Cell(r["id"], link=r["id"], cls="id"),
                         Cell(" · ".join(f"{k}: {pct(r['lag_mix'][k])}" for k in lags)),
                         Cell(pct(r.get("staleness_share")) if r.get("staleness_share") is not None else "—"),
                         Cell(fmt((r.get("lag_kl_k3") or {}).get("0")) if "0" in r["lag_mix"] else "—"),
                         Cell(" · ".join(f"{k}: {fmt((r.get('lag_kl_k3') or {}).get(k))}" for k in older) or "—"))))
    return Section("lags", "lag over steps", "Lag over steps",
                   "Each step's tokens by weight-version lag (trainer version − the version that generated them; "
                   "`unknown` where no version was recorded), the staleness share (the part of KL k3 beyond the lag-0 "
                   "floor) and each lag's KL k3: lag 0 is the numerical floor, which should stay put; `watch` alarms "
                   "when it moves (stale weights) or a lag is negative (docs/staleness.md).", (Table(columns, tuple(rows)),))


def sections(index: dict) -> list[Section]:
    """The index's sections after the runs table, in the order both formats show them (each None when it has nothing
    to show is left out)."""
    found = (pairs_section(index), precision_section(index), trend_section(index), lags_section(index), sweep_section(index),
             envs_section(index))
    return [s for s in found if s is not None]
