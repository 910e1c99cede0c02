"""What tim-report knows by name, each thing described once: every layer reads it, none restates it.

    metrics.py     one entry per metric (name, unit, which way is worse, glossary text, reading bands, trend and
                   history floors, check's option) and the views that say which metrics each place shows
    findings/      one entry per finding (severity rule, title, cause, what to check, glance, evidence names, side,
                   consequence rule), one module per group; severity.py, evidence.py write what the entries declare
    verdicts.py    the regimes' verdicts
    run_words.py   the run view's words: run-level findings, the run verdict, change-point sentences
    formats.py     the output formats, the files each writes and the module that renders it
    numbers.py     how a number is written, for every layer

It sits just above `config` (the thresholds and their sources) and imports nothing heavy.
"""
