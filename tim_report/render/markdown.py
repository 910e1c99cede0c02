"""GitHub-flavoured markdown: one report per run and the index, for a PR comment or $GITHUB_STEP_SUMMARY.

Entry points:
    render_run_md(report, base_url=None) -> str            site/<run-id>/report.md
    render_index_md(index, base_url=None) -> str            site/report.md (index: analysis.run_index.index_summary)

Rules: no markup GitHub strips (no style, class, scripts, data: images); colour is never the only signal
(🟢🟡🔴 go with the word, ✅⚠️❌ with the reading, ▲▼ / △▽ mark ratios outside the 5x / 2x bands); every
user-provided string (token text, group names, model, engines, device) is escaped so it cannot open markup
or break a table cell; the result is at most MAX_CHARS characters (counted in UTF-16 code units, as
browsers and GitHub's API count them): whole sections are dropped from the bottom up, never the title,
the verdict or the summary, and a closing note names what was dropped and links the HTML page.
Deterministic: the same input gives the same text. Renderers compute nothing: numbers come from the Report
or from the index summary, and are only formatted here.
"""

from __future__ import annotations

from ..catalogue import kept as kept_words
from ..catalogue import metrics as catalogue
from ..catalogue.evidence import items as evidence_items
from ..catalogue.numbers import fixed, fmt, pct, plain
from ..catalogue.rescore import table_intro as weights_intro
from ..catalogue.staleness import cache_intro, table_intro
from ..catalogue.sync import TABLE_INTRO as SYNC_INTRO
from ..config import HEALTH, HOT_DIFF, TREND_TABLE_MAX_STEPS, step_health
from . import index_views, run_tables
from .chain_views import bitwise_md, chain_md
from .index_views import REGIME_MARK, WATCHED
from .md import COLOUR, assemble, colour, details, esc, fold, href, run_path, table, write_section, write_table
from .tables import Section
from .views import (
    band_helps,
    banners,
    env_view,
    flat_metrics,
    groups_view,
    headline,
    kv_tables,
    samples_view,
    summary_extra,
    title_parts,
    topk_view,
)

TEXT_CHARS = 160  # model in the title, finding titles, evidence values
TOKEN_CHARS = 32  # one token's text in a per-token table
SAMPLES = 4  # sequences shown (worst first, as the Report orders them)
SAMPLE_TOKENS = 30  # per-token rows per sequence
GROUP_ROWS = 30
INDEX_RUN_ROWS = 100

LEVEL = {"ok": "✅", "warn": "⚠️", "bad": "❌", "na": "➖"}
SEVERITY = {"error": "❌ error", "warn": "⚠️ warn", "info": "ℹ️ info"}
ROUTE = {"train": "✅ train", "train_with_correction": "⚠️ train with correction", "quarantine": "❌ quarantine"}


# ---- the run report -------------------------------------------------------------------------------

def _verdict(report) -> str:
    diag = report.diagnosis
    if not diag:
        return "## Verdict\n\nThe diagnosis did not run for this batch; the numbers below still hold."
    regime = str(diag.get("regime") or "unknown")
    lines = [f"## Verdict: {REGIME_MARK.get(regime, '➖')} {esc(regime.replace('_', ' '))}", "",
             esc(diag.get("verdict"), None, own=True)]
    why = []  # the evidence and the noise band: folded under the verdict, off the first screen
    ev = evidence_items(diag.get("evidence"))
    if ev:
        why.append("Evidence: " + " · ".join(f"{esc(k)} {esc(v, TEXT_CHARS)}" for k, v in ev))
    band = diag.get("band") if band_helps(diag) else None
    if band:
        why.append(f"**Noise band: {esc(band.get('name'))}.** {esc(band.get('reading'), None, own=True)} Noise ceilings "
                   f"used: KL k3 {fmt(band.get('noise_kl_max'))}, mean \\|δ\\| {fmt(band.get('noise_abs_delta_max'))} "
                   f"nats. Chosen from: {esc(band.get('why'), None)}.")
    blocked = (report.routing or {}).get("blocked_by_bug")
    if blocked:
        lines += ["", f"❌ **{esc(blocked['message'], None, own=True)}**"]
    if diag.get("what_to_check"):
        lines += ["", f"**What to check:** {esc(diag['what_to_check'], None, own=True)}"]
    findings = diag.get("findings") or []
    if findings:
        lines += ["", "Findings: " + "; ".join(f"{SEVERITY.get(f.get('severity'), '➖')} {esc(f.get('title'), TEXT_CHARS)}"
                                             for f in findings) + " (details below)."]
    if why:
        lines += ["", details("Evidence" + (" and noise band" if band else ""), "\n\n".join(why))]
    return "\n".join(lines)


def _summary(report) -> str:
    m = report.metrics
    rows = [[f"{esc(h['name'])}", esc(h["value"]), f"{LEVEL.get(h['level'], '➖')} {esc(h['reading'], None, own=True)}"]
            for h in headline(report)]
    extra = [["tokens / sequences", f"{fmt(m.get('tokens'))} / {fmt(m.get('sequences'))}", ""]]
    more = [[esc(x["name"]), esc(x["value"])] for x in summary_extra(report)]  # the rest, one click away
    folded = details("More numbers", table(["metric", "value"], more, numeric=[1]) +
                     f"\n\n{esc(catalogue.CONVENTIONS, None, own=True)}") if more else ""
    return "## Summary\n\n" + _data_problems(report) + table(["metric", "value", "reading"], rows + extra, numeric=[1]) + \
        (f"\n\n{folded}" if folded else "")


def _data_problems(report) -> str:
    """Tokens left out and input values repaired, said before any number they affect (or nothing when there are none)."""
    dp = report.data_problems or {}
    if not dp.get("messages"):
        return ""
    lines = [f"⚠️ {esc(msg, None, own=True)}." for msg in dp["messages"]]
    if dp.get("excluded_tokens"):
        lines.insert(0, f"⚠️ **{fmt(dp['excluded_tokens'])} masked tokens ({pct(dp.get('excluded_fraction'))}) are excluded "
                        "from every number below.**")
    return "\n".join(f"- {line}" for line in lines) + "\n\n"


def _findings(report) -> str:
    findings = (report.diagnosis or {}).get("findings") or []
    if not findings:
        return ("## Findings\n\nNo detector fired (off-by-one shift, one-sided temperature, processed log-probs, dummy log-probs, "
                "precision gap).")
    out = ["## Findings"]
    for f in findings:
        lines = [f"### {SEVERITY.get(f.get('severity'), '➖')}: {esc(f.get('title'), TEXT_CHARS)}", ""]
        lines += [f"- **{label}:** {esc(f[key], None, own=True)}" for key, label in
                  (("consequence_text", "Consequence"), ("side_text", "Side")) if f.get(key)]
        if f.get("likely_cause"):
            lines.append(f"- **Likely cause:** {esc(f['likely_cause'], None, own=True)}")
        if f.get("what_to_check"):
            lines.append(f"- **Check:** {esc(f['what_to_check'], None, own=True)}")
        ev = evidence_items(f.get("evidence"), f.get("id"))
        if ev:
            lines.append("- **Evidence:** " + " · ".join(f"{esc(k)} {esc(v, TEXT_CHARS)}" for k, v in ev))
        for name, cols, rows in kv_tables(f.get("evidence")):
            lines += ["", f"{esc(name.replace('_', ' '))}:", "",
                      table([esc(c) for c in cols], [[esc(v) for v in r] for r in rows], numeric=range(1, len(cols)))]
        out.append("\n".join(lines))
    return "\n\n".join(out)


def _routing(report) -> str:
    r = report.routing or {}
    counts, fractions = r.get("counts") or {}, r.get("fractions") or {}
    unit = esc(r.get("unit") or "group")
    parts = [f"{ROUTE[k]} {fmt(counts.get(k))} ({pct(fractions.get(k))})" for k in ROUTE]
    lines = [f"## Routing by {unit} and what-if corrections", ""]
    if r.get("blocked_by_bug"):
        lines += [f"❌ **{esc(r['blocked_by_bug']['message'], None, own=True)}**", ""]
    lines.append(" · ".join(parts))
    rules = r.get("rules") or {}
    if rules:
        lines += ["", "Rules: " + "; ".join(f"{esc(k)}: {esc(v, None, own=True)}" for k, v in sorted(rules.items())) + "."]
    if report.what_if:
        lines += ["", write_table(run_tables.what_if_table(report))]
        lines += [f"\n{esc(w['note'], None, own=True)}" for w in report.what_if if w.get("note")]
    return "\n".join(lines)


def _by_probability(report) -> str:
    t = run_tables.probability_table(report)
    return f"## |δ| by rollout probability\n\n{write_table(t)}" if t.rows else ""


def _topk(report) -> str:
    """The whole-distribution numbers (both sides' top-k); nothing when the batch has none (the HTML page and
    summary.json say why: a PR comment need not repeat it for every framework dump)."""
    v = topk_view(report)
    if v is None or not v["available"]:
        return ""
    rows = [[esc(c["name"]), esc(c["value"]), f"{LEVEL.get(c['level'], '➖')} {esc(c['reading'], None, own=True)}"] for c in v["cards"]]
    rows += [["KL k3 (sampled tokens)", esc(v["k3"]), "the same quantity from one token per position"],
             ["KL lower bound", esc(v["lower"]), "exact: merging tokens never raises a KL"],
             ["total variation", esc(f"{v['tv'][0]} … {v['tv'][1]}"), f"truncation can hide at most {esc(v['hidden'])}"],
             ["mass outside top-k", esc(f"rollout {v['outside'][0]} · trainer {v['outside'][1]}"),
              f"outside the shared top-k: {esc(v['unresolved'])}"]]
    head = (f"## Whole distribution (top-k)\n\nBoth sides' {fmt(v['k'].get('rollout'))} / {fmt(v['k'].get('trainer'))} most likely "
            f"tokens at {fmt(v['tokens'])} positions.")
    if v["loose"]:
        head += (f"\n\n⚠️ The top-k lists leave {esc(v['unresolved'])} of the mass unresolved: the KL estimate is loose "
                 "(raise --top-k-logprobs).")
    tables = run_tables.topk_tables(report)
    pos = details("By position in the response", write_table(tables["by_position"]))
    return "\n\n".join([head, table(["metric", "value", "reading"], rows, numeric=[1]),
                          "By the sampled token's rollout probability (a KL far above k3 in a row: the distribution moved where "
                          "the samples did not look):", write_table(tables["by_probability"]), pos])


def _groups(report) -> str:
    g = groups_view(report)
    if not g["rows"]:
        return ""
    rows = [[esc(x["name"]), ROUTE.get(x["route"], esc(x["route"])), fmt(x["sequences"]), fmt(x["tokens"]),
             fmt(x["abs_delta_mean"]), fmt(x["k3_mean"]), pct(x["clipped_fraction"]), fmt(x["vetoed_tokens"]), fmt(x["min_ratio"])]
            for x in g["rows"][:GROUP_ROWS]]
    unit = esc(g["unit"])
    shown = len(rows)
    note = (f"The worst {shown} of {fmt(g['total'])} {unit}s (quarantine first, then train with correction, then by mean |δ|); "
            f"the HTML page and summary.json show the worst {fmt(len(g['rows']))}, summary.json the distribution of all."
            if g["total"] > shown else f"All {fmt(g['total'])} {unit}s.")
    body = table([unit, "routing", "seqs", "tokens", "mean \\|δ\\|", "k3", "PPO-clipped", "vetoed", "min r"], rows, numeric=range(2, 9))
    return details(f"Worst {unit}s ({fmt(g['total'])} in all)", f"{note}\n\n{body}")


def _envs(report) -> str:
    v, t = env_view(report), run_tables.env_table(report)
    if v is None or t is None:
        return ""
    w = v["worst"]
    lead = (f"**{esc(w['name'])}** has the highest KL k3: {fmt(w['k3_mean'])}, {fmt(w['k3_vs_batch'], 2)}× the batch's, "
            f"{pct(w['k3_share'])} of Σk3 from {pct(w['token_share'])} of the tokens."
            if v["several"] and w["k3_vs_batch"] is not None else f"One environment, **{esc(w['name'])}**: its numbers are the batch's.")
    return f"## By environment\n\n{lead}\n\n{write_table(t)}"


def _samples(report, html: str) -> str:
    samples = samples_view(report, SAMPLE_TOKENS, SAMPLES)
    if not samples:
        return ""
    blocks = ["Marks: ▲/▼ r above 5 / below 1/5 (outside the 5x band); △/▽ outside the 2x band; "
              f"● |diff| > {plain(HOT_DIFF)} nats; m outside the training mask; ✗ excluded as invalid. "
              "Whitespace: ␣ space, ↵ newline, ⇥ tab, ∅ empty."]
    for s in samples:
        head = [f"**row {fmt(s['sequence'])}** ({esc(s.get('kind'))})"]
        if s.get("group") is not None:
            head.append(f"group {esc(s['group'])}")
        head += [f"{fmt(s.get('tokens'))} tokens", f"mean \\|diff\\| {fmt(s.get('abs_delta_mean'))} nats",
                 f"Σδ {fmt(s.get('seq_log_ratio'))}"]
        if s.get("hot"):
            head.append(f"● {s['hot']} tokens with \\|diff\\| > {plain(HOT_DIFF)}")
        if s.get("out5"):
            head.append(f"▲▼ {s['out5']} outside 5x")
        rows = [[str(x["pos"]), esc(x["flag"], None) if x["flag"] else "", esc(x["token"], TOKEN_CHARS), x["ro"], x["tr"],
                 esc(x["diff"]), x["pr"], x["pt"], esc(x["r"])]
                for x in s["all"][:SAMPLE_TOKENS]]
        n = s["n_rows"]
        more = f"\n\nFirst {SAMPLE_TOKENS} of {n} tokens; the rest are in the {html}." if n > SAMPLE_TOKENS else ""
        blocks.append(" · ".join(head) + "\n\n"
                      + table(["pos", "", "token", "rollout logp", "trainer logp", "diff", "p_rollout", "p_trainer", "r"], rows,
                              numeric=range(3, 9))
                      + more)
    total = len(report.samples)
    return details(f"Samples: {len(samples)} of {total} sequences, token by token", "\n\n".join(blocks))


def _all_numbers(report) -> str:
    rows = [[esc(x["key"]), esc(x["value"])] for x in flat_metrics(report)]
    verl = report.verl or {}
    vrows = [[esc(k), esc(fmt(v))] for k, v in sorted(verl.items()) if not isinstance(v, (dict, list))]
    body = table(["metric", "value"], rows, numeric=[1])
    if vrows:
        body += "\n\nThe same batch under verl's metric names:\n\n" + table(["verl metric", "value"], vrows, numeric=[1])
    return details("All numbers", body)


def _banner_lines(report) -> list[str]:
    """The findings said again under the title (`Finding.banner`: what the batch is, e.g. mixed weight versions)."""
    return [f"⚠️ {esc(title, None)}." for title in banners(report)]


def _about(report) -> str:
    """What was read and how: framework, layout, alignment, and what the reader left out of the metrics, and why."""
    meta = report.run.get("meta") or {}
    shown = ("framework", "layout", "step", "alignment", "environments", "sample_status", "routed_experts")
    rows = [[esc(k), esc(meta.get(k), TEXT_CHARS * 2, own=True)] for k in shown if meta.get(k) is not None]
    body = [table(["field", "value"], rows)] if rows else []  # the source path stays on the HTML page: report.md gets pasted
    excl = meta.get("exclusions") or []
    if excl:
        body += ["", "Left out of every metric by the reader:", "",
                 table(["what", "tokens", "why"], [[esc(e.get("what")), fmt(e.get("tokens")), esc(e.get("why"), None, own=True)]
                                                   for e in excl], numeric=[1])]
    body += [f"- Loader note: {esc(n, None, own=True)}" for n in report.run.get("notes") or []]
    return details("About the batch", "\n".join(body)) if body else ""


def _glossary() -> str:
    lines = [f"{esc(catalogue.CONVENTIONS, None, own=True)}", ""]
    for e in catalogue.glossary():
        line = f"- **{esc(e.name, None, own=True)}**: {esc(e.plain, None, own=True)} Formula: {esc(e.formula, None, own=True)}."
        if e.verl:
            line += f" verl: {esc(e.verl, None, own=True)}."
        lines.append(line)
    return details("Glossary", "\n".join([*lines, "", _kl_bands()]))


def _kl_bands() -> str:
    """The KL band table (catalogue.metrics.kl_band_table), as the page and the index show it."""
    kb = catalogue.kl_band_table()
    return "The KL band table:\n\n" + table([esc(c, None, own=True) for c in kb["columns"]],
                                            [[esc(v, None, own=True) for v in r] for r in kb["rows"]])


def render_run_md(report, base_url: str | None = None) -> str:
    """site/<run-id>/report.md: title, verdict, summary, findings, routing, breakdowns, samples, glossary."""
    t = title_parts(report)
    m = report.metrics
    rid = report.run.get("id") or "run"
    page = href(run_path(rid, "index.html"), base_url) if base_url else "index.html"
    html = f"[HTML report]({page})"
    ess_colour = step_health(m.get("ess"), (report.diagnosis or {}).get("regime"),
                             bool((report.routing or {}).get("blocked_by_bug")))
    sub = [colour(ess_colour) + f" (ESS {fixed(m.get('ess'), 4)})", f"run {esc(rid)}"]
    if t["device"]:
        sub.append(esc(t["device"]))
    if t["step"] is not None:
        sub.append(f"step {esc(t['step'])}")
    framework = (report.run.get("meta") or {}).get("framework")
    if framework not in (None, "dict"):
        sub.append(f"{esc(framework)} dump")
    sub += [f"{fmt(m.get('tokens'))} tokens", f"{fmt(m.get('sequences'))} sequences", html]
    title = f"# {esc(t['model'], TEXT_CHARS)}: {esc(t['rollout'])} → {esc(t['trainer'])}\n\n" + " · ".join(sub)
    core = [title] + _banner_lines(report) + [_verdict(report), _summary(report)]  # the first screen; the rest folded
    core += [fold(part) for part in (chain_md(report), _kept(report), _staleness(report), _sync(report), _weights(report),
                                     _prefix_cache(report), bitwise_md(report)) if part]
    sections = [("findings", _findings(report)), ("routing and what-if", _routing(report)),
                ("|δ| by probability", _by_probability(report)), ("whole distribution", _topk(report)),
                ("by environment", _envs(report)), ("groups", _groups(report)),
                ("samples", _samples(report, html)), ("all numbers", _all_numbers(report)),
                ("about the batch", _about(report)), ("glossary", _glossary())]
    return assemble(core, [(name, fold(s)) for name, s in sections if s], html)


def _kept(report) -> str:
    """The kept sets' sentence and the ratio both ways (run_tables.kept_table, the page's too); empty without them."""
    k = (report.diagnosis or {}).get("kept_sets")
    if not k:
        return ""
    t = run_tables.kept_table(report)
    table = f"\n\n{write_table(t)}" + "".join(f"\n\n{esc(a, None, own=True)}" for a in t.after) if t is not None else ""
    return f"### Kept sets\n\n{esc(kept_words.intro(k), None, own=True)}{table}"


def _staleness(report) -> str:
    """The per-lag table (run_tables.lag_table, the page's too) under its sentence; empty without versions."""
    t = run_tables.lag_table(report)
    if t is None:
        return ""
    lines = "\n\n".join(f"**{esc(line, None, own=True)}**" if i == 0 else esc(line, None, own=True)
                          for i, line in enumerate(t.after))
    return (f"### Staleness by lag\n\n{esc(table_intro(report.staleness), None, own=True)}\n\n{write_table(t)}"
            + (f"\n\n{lines}" if lines else ""))


def _sync(report) -> str:
    """The weight digests by version (run_tables.sync_table, the page's too) and the sync-health line; empty without."""
    t = run_tables.sync_table(report)
    if t is None:
        return ""
    return (f"### Weight sync\n\n{esc(SYNC_INTRO, None, own=True)}\n\n{write_table(t)}\n\n"
            f"**{esc(t.after[0], None, own=True)}**")


def _prefix_cache(report) -> str:
    """Prefix-cache hits against misses (run_tables.cache_table, the page's too); empty when nothing says what was cached."""
    t = run_tables.cache_table(report)
    if t is None:
        return ""
    return (f"### Prefix-cache hits and misses\n\n{esc(cache_intro(report.diagnosis['prefix_cache']), None, own=True)}\n\n"
            f"{write_table(t)}\n\n{esc(t.after[0], None, own=True)}")


def _weights(report) -> str:
    """Which weights sampled each lag bucket (run_tables.weights_table, the page's too); empty when none was rescored."""
    t = run_tables.weights_table(report)
    if t is None:
        return ""
    w = report.rescore
    sides = "; ".join(f"**{esc(c['side'])}**: " + ("the trainer's weights" if c["side"] == "trainer" else
                                                   f"{esc(c.get('model'), None)} ({esc(c.get('dtype'))})")
                      + f", version {esc(c['version']) if c['version'] is not None else 'unknown'}"
                      for c in w["candidates"])
    return (f"### Which weights the engine used\n\n{esc(weights_intro(w), None, own=True)}\n\n{write_table(t)}\n\n"
            f"Candidates: {sides}.")


# ---- the index ------------------------------------------------------------------------------------

def _run_verdict(index: dict, base_url: str | None) -> str:
    """The run's verdict over its steps, first after the title: what its steps say together, since when, why."""
    v = index.get("run")
    if not v:
        return ""
    since = (f" ([step {esc(str(v['since_step']))}]({href(run_path(v['since_run'], 'index.html'), base_url)}))"
             if v["stretch_steps"] < v["steps"] else "")
    mark = WATCHED if v.get("climbing") and v["regime"] == "staleness" else REGIME_MARK.get(v["regime"], "➖")
    lines = [f"**Run verdict:** {mark} {esc(v['verdict'], None, own=True)}{since}"]
    if v.get("what_to_check"):
        lines += ["", f"**What to check:** {esc(v['what_to_check'], None, own=True)}"]
    for f in v.get("findings") or []:
        lines += ["", f"- {SEVERITY.get(f['severity'], f['severity'])} **{esc(f['title'], None, own=True)}**",
                  f"  - **Likely cause:** {esc(f['likely_cause'], None, own=True)}"]
    return "\n".join(lines)


def _runs_table(index: dict, base_url: str | None) -> str:
    runs = index["runs"]
    out = "## Runs\n\n" + write_table(index_views.runs_table(index), base_url, rows=INDEX_RUN_ROWS)
    if len(runs) > INDEX_RUN_ROWS:
        out += f"\n\nThe first {INDEX_RUN_ROWS} of {fmt(len(runs))} runs; all are in index.html."
    return out + _unreadable(index)


def _unreadable(index: dict) -> str:
    """The steps of the run that could not be read, each with why: they are in no table above or below."""
    bad = index.get("unreadable") or []
    if not bad:
        return ""
    out = (f"\n\n**{len(bad)} step{'s' if len(bad) != 1 else ''} could not be read**, so "
           f"{'they are' if len(bad) != 1 else 'it is'} left out of everything here:\n\n"
           + write_table(index_views.unreadable_table(index), rows=INDEX_RUN_ROWS))
    if len(bad) > INDEX_RUN_ROWS:
        out += f"\n\nThe first {INDEX_RUN_ROWS} of {fmt(len(bad))}; all are in index.json's `unreadable`."
    return out


def _trend(s: Section, base_url: str | None = None) -> str:
    """The trend section: its change points, then the step table (the HTML index draws its columns as charts)."""
    changes = ("**Change points**\n\n" + "\n".join(
        f"- {'▲' if c['worse'] else '▼'} [step {esc(str(c['step']))}]({href(c['run'] + '/index.html', base_url)}): "
        f"{esc(c['sentence'], None, own=True)}" for c in s.changes) if s.changes else esc(s.quiet, None, own=True))
    steps = len(s.tables[0].rows)
    body = (write_table(s.tables[0], base_url) if steps <= TREND_TABLE_MAX_STEPS else
            f"Step by step, the numbers are charts on the HTML index and rows in `index.json` ({steps} steps).")
    return write_section(s, base_url, body=f"{changes}\n\n{body}")


def render_index_md(index: dict, base_url: str | None = None) -> str:
    """site/report.md: the runs table, the engine-pair table, the precision matrix and the trend, from `index`."""
    runs = index["runs"]
    page = href("index.html", base_url) if base_url else "index.html"
    html = f"[HTML index]({page})"
    hc = index["health_counts"]
    counts = " · ".join(f"{COLOUR[h]} {hc[h]} {h}" for h in ("green", "amber", "red", "unknown") if hc.get(h))
    title = (f"# Rollout vs trainer log-prob mismatch: {len(runs)} run{'s' if len(runs) != 1 else ''}\n\n"
             f"{counts or 'no runs'} · health by token ESS: 🟢 ≥ {plain(HEALTH.green)}, 🟡 {plain(HEALTH.amber)}–{plain(HEALTH.green)}, "
             f"🔴 < {plain(HEALTH.amber)} · {html}")
    columns = "\n".join(["The columns (each run's report has the whole glossary; index.html and index.json add "
                          + ", ".join(catalogue.metric(k).name for k in catalogue.INDEX if k not in catalogue.INDEX_NARROW)
                          + " and the routing):", ""] + [
        f"- **{esc(m.name, None, own=True)}**: {esc(m.plain, None, own=True)}"
        for m in (catalogue.metric(k) for k in catalogue.INDEX_NARROW)] + ["", _kl_bands()])
    core = [title, *filter(None, [_run_verdict(index, base_url)]), _runs_table(index, base_url)]
    sections = [(s.short, _trend(s, base_url) if s.id == "trend" else write_section(s, base_url))
                for s in index_views.sections(index)] + [("columns", columns)]
    return assemble(core, [(n, s) for n, s in sections if s], html)


class MarkdownRenderer:
    def run(self, report, options) -> dict[str, str]:
        return {"report.md": render_run_md(report, base_url=options.base_url)}

    def index(self, index: dict, options) -> dict[str, str]:
        return {"report.md": render_index_md(index, base_url=options.base_url)}

    def compare(self, comparison: dict, options) -> dict[str, str]:
        from .compare.markdown import render_compare_md

        return {"compare.md": render_compare_md(comparison, "index.html")}


RENDERER = MarkdownRenderer()
