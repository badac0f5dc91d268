"""The placement flags of a llama.cpp command line, read as llama.cpp reads them and checked against the devices a
build really has here: `syntax` (reading and writing the flags), `rules` (what was observed to fail, as data),
`check` (pure checks), `verify` (a tiny run that proves or refutes them), `run` (the whole check of one command line).

Every rule was observed on real runs (docs/real-runs.md) and carries the llama.cpp commit it was seen at; a build of
another commit gets the finding with that caveat, and `--verify` says when a run contradicts a rule.
"""
