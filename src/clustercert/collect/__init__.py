"""Collect: all remote and local I/O with the nodes.

collect.ssh: one connection per node running the node runner (clustercert/remote/runner.py), and
the probes' server/client sessions; collect.engine: playbook runs through ansible-runner;
collect.slurm: scontrol on a Slurm node. Imports model, remote and the base modules only
(docs/architecture.md).
"""

# how many nodes a run works on at once where -f/--forks is not given (as ansible.cfg's forks): the verbs, the
# drivers (checks.run, probes.run) and the backends' collect_many read it from here
DEFAULT_FORKS = 25
