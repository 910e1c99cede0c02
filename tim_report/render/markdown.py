"""GitHub-flavoured markdown: one report per run and the index, for a PR comment or $GITHUB_STEP_SUMMARY.

Entry points:
    render_run_md(report, base_url=None) -> str            site/<run-id>/report.md
    render_index_md(index, base_url=None) -> str            site/report.md (index: analysis.runs.index_summary)

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

from ..catalogue import metrics as catalogue
from ..catalogue.numbers import fixed, fmt, pct, plain
from ..config import HEALTH, HOT_DIFF, TREND_TABLE_MAX_STEPS, health
from .chain_views import bitwise_md, chain_md
from .md import assemble, details, esc, href, run_path, table
from .views import (
    banners,
    env_view,
    flat_metrics,
    groups_view,
    headline,
    kv_items,
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

COLOUR = {"green": "🟢", "amber": "🟡", "red": "🔴", "unknown": "⚪"}
LEVEL = {"ok": "✅", "warn": "⚠️", "bad": "❌", "na": "➖"}
SEVERITY = {"error": "❌ error", "warn": "⚠️ warn", "info": "ℹ️ info"}
REGIME = {"identical": "✅", "numerical_noise": "✅", "elevated": "⚠️", "systematic": "❌"}
ROUTE = {"train": "✅ train", "train_with_correction": "⚠️ train with correction", "quarantine": "❌ quarantine"}


# ---- the run report -------------------------------------------------------------------------------

def _colour(c: str) -> str:
    return f"{COLOUR.get(c, '⚪')} {c}"


def _verdict(report) -> str:
    diag = report.diagnosis
    if not diag:
        return "## Verdict\n\nThe diagnosis did not run for this batch; the numbers below still hold."
    regime = str(diag.get("regime") or "unknown")
    lines = [f"## Verdict: {REGIME.get(regime, '➖')} {esc(regime.replace('_', ' '))}", "",
             esc(diag.get("verdict"), None, own=True)]
    ev = kv_items(diag.get("evidence"))
    if ev:
        lines += ["", "Evidence: " + " · ".join(f"{esc(k)} = {esc(v, TEXT_CHARS)}" for k, v in ev)]
    band = diag.get("band")
    if band:
        lines += ["", f"**Noise band: {esc(band.get('name'))}.** {esc(band.get('reading'), None, own=True)} Noise ceilings used: "
                  f"KL k3 {fmt(band.get('noise_kl_max'))}, mean \\|δ\\| {fmt(band.get('noise_abs_delta_max'))} nats. "
                  f"Chosen from: {esc(band.get('why'), None)}."]
    blocked = (report.routing or {}).get("blocked_by_bug")
    if blocked:
        lines += ["", f"❌ **{esc(blocked['message'], None, own=True)}**"]
    if diag.get("what_to_check"):
        lines += ["", f"**What to check:** {esc(diag['what_to_check'], None, own=True)}"]
    findings = diag.get("findings") or []
    if findings:
        lines += ["", "Findings: " + "; ".join(f"{SEVERITY.get(f.get('severity'), '➖')} {esc(f.get('title'), TEXT_CHARS)}"
                                             for f in findings) + " (details below)."]
    return "\n".join(lines)


def _summary(report) -> str:
    m = report.metrics
    rows = [[f"{esc(h['name'])}", esc(h["value"]), f"{LEVEL.get(h['level'], '➖')} {esc(h['reading'], None, own=True)}"]
            for h in headline(report)]
    extra = [["tokens / sequences", f"{fmt(m.get('tokens'))} / {fmt(m.get('sequences'))}", ""]]
    extra += [[esc(x["name"]), esc(x["value"]), ""] for x in summary_extra(report)]
    return "## Summary\n\n" + _data_problems(report) + table(["metric", "value", "reading"], rows + extra, numeric=[1]) + \
        f"\n\n{esc(catalogue.CONVENTIONS, None, own=True)}"


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
        if f.get("likely_cause"):
            lines.append(f"- **Likely cause:** {esc(f['likely_cause'], None, own=True)}")
        if f.get("what_to_check"):
            lines.append(f"- **Check:** {esc(f['what_to_check'], None, own=True)}")
        ev = kv_items(f.get("evidence"))
        if ev:
            lines.append("- **Evidence:** " + "; ".join(f"{esc(k)} = {esc(v, TEXT_CHARS)}" for k, v in ev))
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
        rows = [[esc(w.get("name")), esc(w.get("level")), esc(w.get("action")), esc(w.get("rule"), None, own=True),
                 esc(w.get("source"), None, own=True),
                 pct(w.get("token_fraction")), pct(w.get("sequence_fraction"))] for w in report.what_if]
        lines += ["", table(["correction", "level", "action", "rule", "as in", "tokens affected", "sequences affected"], rows,
                            numeric=[5, 6])]
    return "\n".join(lines)


def _by_probability(report) -> str:
    rows = [[esc(b.get("bucket")), fmt(b.get("tokens")), pct(b.get("token_share")),
             esc(f"{fmt(b.get('abs_delta_mean'))} ± {fmt(b.get('abs_delta_se'), 2)}"), fmt(b.get("delta_mean")),
             fmt(b.get("k3_mean")), pct(b.get("abs_delta_share")), pct(b.get("k3_share"))]
            for b in (report.breakdowns or {}).get("by_probability") or []]
    if not rows:
        return ""
    return ("## |δ| by rollout probability\n\n"
            + table(["p_rollout", "tokens", "share", "mean \\|δ\\| ± s.e.", "mean δ", "mean k3", "share of Σ\\|δ\\|", "share of Σk3"],
                    rows, numeric=range(1, 8)))


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
    cols = [esc(c) for c in v["columns"]]
    tables = [table(["p_rollout", "tokens"] + cols, [[esc(x) for x in r] for r in v["by_probability"]], numeric=range(1, 7))]
    pos = details("By position in the response", table(["position", "tokens"] + cols, [[esc(x) for x in r] for r in v["by_position"]],
                                                       numeric=range(1, 7)))
    return "\n\n".join([head, table(["metric", "value", "reading"], rows, numeric=[1]),
                          "By the sampled token's rollout probability (a KL far above k3 in a row: the distribution moved where "
                          "the samples did not look):", *tables, pos])


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
            "all are in summary.json and the HTML page." if g["total"] > shown else f"All {fmt(g['total'])} {unit}s.")
    body = table([unit, "routing", "seqs", "tokens", "mean \\|δ\\|", "k3", "PPO-clipped", "vetoed", "min r"], rows, numeric=range(2, 9))
    return details(f"Worst {unit}s ({fmt(g['total'])} in all)", f"{note}\n\n{body}")


def _envs(report) -> str:
    v = env_view(report)
    if v is None:
        return ""
    rows = [[esc(x["name"]), fmt(x["sequences"]), fmt(x["tokens"]), fmt(x["abs_delta_mean"]), fmt(x["k3_mean"]),
             pct(x["k3_share"]), pct(x["clipped_fraction"]), fmt(x["vetoed_tokens"]), fmt(x["min_ratio"])] for x in v["rows"]]
    w = v["worst"]
    lead = (f"**{esc(w['name'])}** has the highest KL k3: {fmt(w['k3_mean'])}, {fmt(w['k3_vs_batch'], 2)}× the batch's, "
            f"{pct(w['k3_share'])} of Σk3 from {pct(w['token_share'])} of the tokens."
            if v["several"] and w["k3_vs_batch"] is not None else f"One environment, **{esc(w['name'])}**: its numbers are the batch's.")
    body = table(["environment", "seqs", "tokens", "mean \\|δ\\|", "KL k3", "share of Σk3", "PPO-clipped", "vetoed", "min r"],
                 rows, numeric=range(1, 9))
    return f"## By environment\n\n{lead}\n\n{body}"


def _samples(report, html: str) -> str:
    samples = samples_view(report)[:SAMPLES]
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
        n = len(s["all"])
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
    colour = health(m.get("ess"))
    sub = [_colour(colour) + f" (ESS {fixed(m.get('ess'), 4)})", f"run {esc(rid)}"]
    if t["device"]:
        sub.append(esc(t["device"]))
    if t["step"] is not None:
        sub.append(f"step {esc(t['step'])}")
    framework = (report.run.get("meta") or {}).get("framework")
    if framework not in (None, "dict"):
        sub.append(f"{esc(framework)} dump")
    sub += [f"{fmt(m.get('tokens'))} tokens", f"{fmt(m.get('sequences'))} sequences", html]
    title = f"# {esc(t['model'], TEXT_CHARS)}: {esc(t['rollout'])} → {esc(t['trainer'])}\n\n" + " · ".join(sub)
    core = [title] + _banner_lines(report) + [_verdict(report), _summary(report)]
    core += [part for part in (chain_md(report), bitwise_md(report)) if part]
    sections = [("findings", _findings(report)), ("routing and what-if", _routing(report)),
                ("|δ| by probability", _by_probability(report)), ("whole distribution", _topk(report)),
                ("by environment", _envs(report)), ("groups", _groups(report)),
                ("samples", _samples(report, html)), ("all numbers", _all_numbers(report)),
                ("about the batch", _about(report)), ("glossary", _glossary())]
    return assemble(core, [(name, s) for name, s in sections if s], html)


# ---- the index ------------------------------------------------------------------------------------

def _run_verdict(index: dict, base_url: str | None) -> str:
    """The run's verdict over its steps, first after the title: what its steps say together, since when, why."""
    v = index.get("run")
    if not v:
        return ""
    since = (f" ([step {esc(str(v['since_step']))}]({href(run_path(v['since_run'], 'index.html'), base_url)}))"
             if v["stretch_steps"] < v["steps"] else "")
    lines = [f"**Run verdict:** {REGIME.get(v['regime'], '➖')} {esc(v['verdict'], None, own=True)}{since}"]
    if v.get("what_to_check"):
        lines += ["", f"**What to check:** {esc(v['what_to_check'], None, own=True)}"]
    for f in v.get("findings") or []:
        lines += ["", f"- {SEVERITY.get(f['severity'], f['severity'])} **{esc(f['title'], None, own=True)}**",
                  f"  - **Likely cause:** {esc(f['likely_cause'], None, own=True)}"]
    return "\n".join(lines)


def _runs_table(index: dict, base_url: str | None) -> str:
    runs = index["runs"]
    columns = [catalogue.metric(k) for k in catalogue.INDEX]
    rows = []
    for r in runs[:INDEX_RUN_ROWS]:
        link = f"[{esc(r['id'])}]({href(run_path(r['id'], 'index.html'), base_url)})"
        md = f"[md]({href(run_path(r['id'], 'report.md'), base_url)})"
        rt = r["routing"]
        rows.append([
            _colour(r["health"]), f"{link} ({md})", esc(r["model"]), f"{esc(r['rollout_engine'])} → {esc(r['trainer_engine'])}",
            f"{esc(r['rollout_dtype'])} → {esc(r['trainer_dtype'])}", esc(r["device"]),
            fmt(r["step"]) if r["step"] is not None else "—", fmt(r["tokens"]),
            *[esc(m.write(r[m.key])) for m in columns],
            "❌ fix the bug first" if r["blocked_by_bug"] else
            f"{fmt(rt.get('train'))} / {fmt(rt.get('train_with_correction'))} / {fmt(rt.get('quarantine'))}",
            f"{REGIME.get(r['regime'], '➖')} {esc((r['regime'] or '—').replace('_', ' '))}",
        ])
    out = "## Runs\n\n" + table(["colour", "run", "model", "engines", "dtypes", "device", "step", "tokens",
                                  *[esc(m.name) for m in columns], "routing (train / corr. / quar.)", "verdict"],
                                 rows, numeric=range(6, 8 + len(columns)))
    if len(runs) > INDEX_RUN_ROWS:
        out += f"\n\nThe first {INDEX_RUN_ROWS} of {fmt(len(runs))} runs; all are in index.html."
    return out + _unreadable(index)


def _unreadable(index: dict) -> str:
    """The steps of the run that could not be read, each with why: they are in no table above or below."""
    bad = index.get("unreadable") or []
    if not bad:
        return ""
    rows = [["❌", esc(u["id"]), fmt(u["step"]) if u["step"] is not None else "—", esc(u["path"], None),
             esc(u["reason"], None)] for u in bad[:INDEX_RUN_ROWS]]  # the reason may quote the file: not our words
    out = (f"\n\n**{len(bad)} step{'s' if len(bad) != 1 else ''} could not be read**, so "
           f"{'they are' if len(bad) != 1 else 'it is'} left out of everything here:\n\n"
           + table(["", "run", "step", "path", "why"], rows, numeric=[2]))
    if len(bad) > INDEX_RUN_ROWS:
        out += f"\n\nThe first {INDEX_RUN_ROWS} of {fmt(len(bad))}; all are in index.json's `unreadable`."
    return out


def _pairs_table(index: dict) -> str:
    rows = [[_colour(p["health"]), f"{esc(p['rollout_engine'])} {esc(p['rollout_dtype'])}",
             f"{esc(p['trainer_engine'])} {esc(p['trainer_dtype'])}", fmt(p["count"]), fixed(p["mean_ess"], 4),
             pct(p["mean_clipped"]), fmt(p["mean_seq_log_ratio"]), fmt(p["mean_abs_delta"]), fmt(p["worst_abs_delta_max"]),
             fmt(p["tokens"])]
            for p in index["engine_pairs"]]
    out = ("## Engine pairs\n\nRuns with the same rollout engine and dtype and the same trainer engine and dtype, aggregated: "
           "means over runs, the worst max |δ|, total tokens; the colour is the mean ESS's.")
    if rows:
        out += "\n\n" + table(["colour", "rollout", "trainer", "runs", "mean ESS", "mean clipped", "mean Σδ", "mean \\|δ\\|",
                                "worst max \\|δ\\|", "tokens"], rows, numeric=range(3, 10))
    unpaired = index.get("unpaired_runs") or []
    if unpaired:
        out += (f"\n\n⚠️ {len(unpaired)} run(s) name no engines and dtypes and are not averaged with anything: "
                + ", ".join(esc(r) for r in unpaired[:20]) + (" …" if len(unpaired) > 20 else "")
                + ". Name them with `--meta rollout_engine=... --meta rollout_dtype=...`.")
    return out


def _precision_table(index: dict) -> str:
    p = index.get("precision")
    if not p:
        return ""
    rows = []
    for ro, line in zip(p["rollout_dtypes"], p["cells"]):
        cells = [esc(ro)]
        for c in line:
            cells.append("—" if c is None else
                         f"{COLOUR.get(c['health'], '⚪')} \\|δ\\| {fmt(c['mean_abs_delta_median'])} · KL {fmt(c['mean_kl_k3'])} · "
                         f"{c['count']} run{'s' if c['count'] != 1 else ''}")
        rows.append(cells)
    return ("## Precision matrix\n\nRollout dtype (rows) × trainer dtype (columns): mean over runs of median |δ| (nats) and KL k3.\n\n"
            + table(["rollout \\\\ trainer"] + [esc(d) for d in p["trainer_dtypes"]], rows))


def _trend_table(index: dict, base_url: str | None = None) -> str:
    tr = index.get("trend")
    if not tr:
        return ""
    note = f" {tr['unstepped']} runs without a step are not shown." if tr.get("unstepped") else ""
    cps = tr.get("change_steps") or []
    changes = ("**Change points**\n\n" + "\n".join(
        f"- {'▲' if c['worse'] else '▼'} [step {esc(str(c['step']))}]({href(c['run'] + '/index.html', base_url)}): "
        f"{esc(c['sentence'])}" for c in cps) if cps else
        f"Change points need at least {tr['min_steps_for_change']} steps." if tr["steps"] < tr["min_steps_for_change"] else
        "No change point: every metric keeps its level over the run.")
    metrics = tr["metrics"]
    if tr["steps"] > TREND_TABLE_MAX_STEPS:
        body = f"The step-by-step table is on the HTML index and in `index.json` ({tr['steps']} steps)."
    else:
        rows = [[fmt(x["step"]), esc(x["run"])] + [esc(catalogue.metric(m["key"]).write(x[m["key"]])) for m in metrics]
                for x in tr["rows"]]
        body = table(["step", "run"] + [esc(m["name"]) for m in metrics], rows, numeric=range(2, 2 + len(metrics)))
    return f"## Over training steps\n\n{tr['steps']} steps.{note}\n\n{changes}\n\n{body}"


def _sweep(index: dict) -> str:
    blocks = []
    for s in index.get("sweep") or []:
        rows = [[fmt(p["max_new_tokens"]), fmt(p["mean_length"]), fmt(p["sequences"]), fmt(p["abs_sum"]), fmt(p["kl_k3"]),
                 fmt(p["kl_seq"])] for p in s["points"]]
        lines = [f"- {name} grows {esc(s[k]['reading'], None, own=True) if s[k] else '— (a value of 0)'}"
                 for name, k in (("\\|Σδ\\|", "abs_sum"), ("KL per sequence", "kl_seq"))]
        blocks.append(f"### {esc(' '.join(s['pair'][:2]))} → {esc(' '.join(s['pair'][2:]))}\n\n"
                      + table(["max new tokens", "mean length", "sequences", "mean \\|Σδ\\|", "KL k3 per token",
                               "KL per sequence"], rows, numeric=range(6)) + "\n\n" + "\n".join(lines))
    return "## Length sweep\n\n" + "\n\n".join(blocks) if blocks else ""


def _env_table(index: dict) -> str:
    envs = index.get("envs")
    if not envs:
        return ""
    rows = [[esc(e["env"]), fmt(e["steps"]), f"{fmt(e['first'])} (step {esc(str(e['first_step']))})",
             f"{fmt(e['last'])} (step {esc(str(e['last_step']))})", fmt(e["last_over_first"], 2),
             f"{fmt(e['worst'])} (step {esc(str(e['worst_step']))})"] for e in envs]
    return ("## By environment over the run\n\nKL k3 of each environment the steps name, worst first.\n\n"
            + table(["environment", "steps", "first", "last", "last ÷ first", "worst"], rows, numeric=range(1, 6)))


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
    columns = "\n".join(["The columns (each run's report has the whole glossary):", ""] + [
        f"- **{esc(m.name, None, own=True)}**: {esc(m.plain, None, own=True)}"
        for m in (catalogue.metric(k) for k in (*catalogue.INDEX, "routing"))] + ["", _kl_bands()])
    core = [title, *filter(None, [_run_verdict(index, base_url)]), _runs_table(index, base_url)]
    sections = [("engine pairs", _pairs_table(index) if len(runs) > 1 else ""), ("precision matrix", _precision_table(index)),
                ("trend over steps", _trend_table(index, base_url)), ("length sweep", _sweep(index)), ("by environment", _env_table(index)),
                ("columns", columns)]
    return assemble(core, [(n, s) for n, s in sections if s], html)


class MarkdownRenderer:
    def run(self, report, options) -> dict[str, str]:
        return {"report.md": render_run_md(report, base_url=options.base_url)}

    def index(self, index: dict, options) -> dict[str, str]:
        return {"report.md": render_index_md(index, base_url=options.base_url)}

    def compare(self, comparison: dict, options) -> dict[str, str]:
        if comparison.get("kind") == "arms":
            from .arms import render_arms_md

            return {"compare.md": render_arms_md(comparison, "index.html")}
        from .compare_md import render_compare_md

        return {"compare.md": render_compare_md(comparison, "index.html")}


RENDERER = MarkdownRenderer()
