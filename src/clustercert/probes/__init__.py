"""Probes: node and node-to-node measurements, run in rounds, localised, judged.

The package has the shape of clustercert.checks, one module a step:

- catalog   the probes by name, their thresholds, the channels localisation reasons over
- commands  the command lines (pure builders, every value quoted)
- plan      what runs where: a node's own probes, a pair's jobs and ports, the reachability pass (pure)
- schedule  round 1's matching (failure domains kept apart), the next round's pairs (pure)
- localise  which node, fabric and probe, or which link, explains the failures (pure group testing)
- rounds    the round loop's decisions: first round, record, next round, stop (pure)
- evaluate  a tool's output and its threshold -> a Measurement (pure)
- judge     what makes a measurement good: thresholds (certify, probe) or a baseline (drift)
- timing    probe-phase wall time against the tools' own critical path
- run       the one place that drives clustercert.collect for probes: node phase, pair rounds, launch

certify, probe and drift each call ``run.run`` with their own judge and hold no probe logic.
"""
