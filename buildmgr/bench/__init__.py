"""`buildmgr bench`: builds and placements measured at matched depth, with proof of which devices did the work.
`config` (CONFIGs and the workload), `logs` (what llama-bench printed), `sampling` (the host during a run), `judge`
(valid, fallback or unproven, per phase), `stats` and `rows` (the numbers, their comparison and the verdicts),
`runner` (the stage) and `plot` (the picture). llama-bench does the timing; buildmgr decides what the timing means.
"""
