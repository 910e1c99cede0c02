"""The thresholds of what the sampler kept and what one side alone did (analysis/duplicates.py, analysis/lag/alignment.py),
each with its source."""

# identical_completions (analysis/duplicates.py): the Poisson upper tail of the pairs of identical completions in the
# batch's groups, given the pairs the sampler's own sequence probabilities expect (E_q[q(Y)] = Σ q²). Our choice: one
# batch in a million of independent samples is called a shared seed; a copied long completion has a tail far below it
# (q(y) ~ e^-50), a repeated short certain answer one near 1.
DUPLICATE_P_MAX = 1e-6
# versions_misaligned (analysis/lag/alignment.py): the share of trained spans (two tokens or more, at least
# min_localise_sequences of them) whose first (or last) token alone has an unknown version. A per-token version array
# one position off the loss mask (AReaL #1736) gives it every span; a clean array none. Our choice: nine in ten, so a
# few spans genuinely opened by an unlabelled token do not make a shift.
VERSION_SHIFT_SHARE = 0.9
