"""The numbers as pandas DataFrames, for a notebook: a batch's tokens, and a site's steps with their change points.

    report = tim_report.analyze(tim_report.load("step_batch.pt"))
    tokens = report.tokens_frame()                      # one row per token: both log-probs, δ, r, where it sits
    steps = tim_report.read_site("site/").steps_frame() # one row per step of index.json, change points marked

pandas is an optional extra (`pip install -e ".[notebook]"`), imported here only: the analysis stays numpy.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .catalogue.metrics import ROW
from .errors import BadInput
from .model import StepBatch

INSTALL_HINT = 'pandas is not installed: pip install -e ".[notebook]" (or pip install pandas)'
SIDES = ("shadow_logp", "floor_logp")  # a batch's further log-prob arrays over the same tokens, when it has them
TEXT_COLUMNS = ("regime", "verdict", "health", "model", "rollout_engine", "rollout_dtype", "trainer_engine", "trainer_dtype",
                "device")


def _pandas() -> Any:
    try:
        import pandas
    except ImportError:
        raise ImportError(INSTALL_HINT) from None
    return pandas


def tokens_frame(batch: StepBatch, text: bool = False):
    """One row per token of `batch`: `sequence`, `position` (in its response), `token_id`, `trained` (the loss mask),
    `rollout_logp`, `trainer_logp`, `delta` (trainer − rollout, nats), `ratio` (exp δ), and where they exist `turn`,
    `env`, `group`, the batch's other sides (`shadow_logp`, `floor_logp`) and, with `text=True`, each token's text
    (decoding is slow on millions of tokens, so it is asked for). Every token is a row, trained or not: filter on
    `trained` for what the metrics count."""
    pd = _pandas()
    seq = batch.seq_index()
    position = np.arange(batch.n_tokens) - np.repeat(batch.offsets[:-1], batch.seq_lengths)
    delta = batch.trainer_logp - batch.rollout_logp
    with np.errstate(over="ignore", invalid="ignore"):
        ratio = np.exp(delta)
    columns: dict[str, object] = {"sequence": seq, "position": position}
    if batch.token_ids is not None:
        columns["token_id"] = np.asarray(batch.token_ids)
    if text:
        columns["token"] = batch.token_strings(slice(0, batch.n_tokens))
    columns |= {"trained": batch.mask, "rollout_logp": batch.rollout_logp, "trainer_logp": batch.trainer_logp,
                "delta": delta, "ratio": ratio}
    if batch.turn is not None:
        columns["turn"] = batch.turn
    for name, per_seq in (("env", batch.env), ("group", batch.group)):
        if per_seq is not None:
            columns[name] = np.asarray(per_seq)[seq]
    for side in SIDES:
        if getattr(batch, side) is not None:
            columns[side] = getattr(batch, side)
    return pd.DataFrame(columns)


@dataclass
class Site:
    """A site's index.json, read as untrusted input (site/index_json.read_document: capped, schema checked)."""

    path: Path
    document: dict

    @property
    def run_verdict(self) -> str | None:
        run = self.document.get("run")
        verdict = run.get("verdict") if isinstance(run, dict) else None
        return verdict if isinstance(verdict, str) else None

    def steps_frame(self) -> Any:
        """One row per step (index.json's runs, in order): `id`, `step`, the row's numbers (catalogue ROW), the
        regime, verdict, engines and dtypes, `findings` (ids, comma-joined), and the run view's change points:
        `change_point` (a level shifts from this step), `change_metrics` and `change_sentence`."""
        from .site.index_json import number

        pd = _pandas()
        changes: dict[object, dict] = {}
        for cp in self.document.get("change_steps") or []:
            if isinstance(cp, dict):
                changes.setdefault(_key(cp.get("step")), cp)
        records = []
        for i, row in enumerate(self.document["runs"]):
            if not isinstance(row, dict):
                raise BadInput(self.path, f"runs[{i}] is not an object")
            rec: dict[str, object] = {"id": _text(row.get("id")), "step": number(self.path, i, row, "step")}
            rec |= {key: number(self.path, i, row, key) for key in ROW}
            rec |= {key: _text(row.get(key)) for key in TEXT_COLUMNS}
            findings = row.get("findings")
            rec["findings"] = ",".join(_finding_id(f) for f in findings) if isinstance(findings, list) else ""
            cp = changes.get(_key(rec["step"]))
            rec["change_point"] = cp is not None
            rec["change_metrics"] = ",".join(m for m in (cp or {}).get("metrics") or [] if isinstance(m, str))
            rec["change_sentence"] = _text((cp or {}).get("sentence"))
            records.append(rec)
        return pd.DataFrame.from_records(records, columns=["id", "step", *ROW, *TEXT_COLUMNS, "findings", "change_point",
                                                           "change_metrics", "change_sentence"])


def read_site(path: str | Path) -> Site:
    """The site folder `tim-report build` or `watch` wrote (or its index.json); one line of BadInput when it is not one."""
    from .site.index_json import read_document

    index, doc = read_document(path)
    return Site(index, doc)


def _key(step: object) -> object:
    return float(step) if isinstance(step, (int, float)) and not isinstance(step, bool) else step


def _text(v: object) -> str | None:
    return v if isinstance(v, str) else None


def _finding_id(f: object) -> str:
    if isinstance(f, dict):
        return str(f.get("id", ""))
    return str(f)
