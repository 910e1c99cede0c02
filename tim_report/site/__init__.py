"""The output site: everything about the folder tim-report writes and reads back.

    layout.py      the names in a site (the marker, the cache entry, the files of each format)
    publish.py     staging and atomic moves: all or nothing, never touching what tim-report did not write
    safe_fs.py     the file-system steps those are made of, trusting nothing this process did not create
    cache.py       the per-step cache entry in each run folder (its key, its row)
    index_json.py  index.json: its schema, written by every build and read back (`check --history`)
"""
