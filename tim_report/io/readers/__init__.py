"""One reader per file format: each turns a file into plain values (numpy arrays, lists, strings, dicts)."""
