"""clustercert-lab: a simulated GPU/InfiniBand cluster on one machine, with fault injection (a distribution of
its own beside clustercert: clustercert-lab/pyproject.toml; the tool installs and runs without it)."""

__version__ = "0.1.0"
