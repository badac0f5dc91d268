"""Builds as release artifacts: a CI matrix (`matrix`), byte-identical archives and the reading of one (`archive`),
whether a host can run one (`compat`), installing one as a build (`install`), and rebuilding one from its receipt to
compare (`reproduce`).

Naming follows upstream's `llama-<tag>-bin-<os>-<variant>-<cpu>.tar.gz`. A recipe's `+` becomes `-`
(`cuda+vulkan` → `cuda-vulkan`): release assets are served from object storage whose URL decoding turns a `+` in a
path into a space, and upstream never puts one in a name.
"""
