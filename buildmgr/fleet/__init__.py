"""Other hosts: llama.cpp's RPC server served from a build, and the devices a fleet of them exposes."""
