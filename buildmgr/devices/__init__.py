"""The devices llama.cpp uses here: vendor-tool captures, the ggml-API probe, identity (which names are one card), the inventory."""
