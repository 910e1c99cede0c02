"""What tim-report knows by name, each thing described once: every layer reads it, none restates it.

    formats.py     the output formats, the files each writes and the module that renders it
"""
