"""The lag and sync analysis: which weights sampled each token, and whether the engine held the weights it claims
(design §10 and §12, docs/staleness.md).

- `versions`: weight versions → per-token lags (trainer version − generation version; unknown never 0);
- `split`: the mismatch split by lag, staleness against the lag-0 numerical floor, exact and additive;
- `findings`: the lag detectors over one batch's split;
- `history`: a run's steps read lag by lag (`watch`'s alarms, the run verdict);
- `rescored`: which checkpoint (`rescore`) each lag bucket's tokens are nearest to, and the version they look like.
"""
