"""`buildmgr tune`: the fastest honest placement of one model on this host, found by measurement (space, race)
and proven by serving it (serve); llama.cpp's own fit is its seed and its oracle of memory (oracle)."""
