"""clustercert: provision, certify and watch GPU/InfiniBand nodes."""

__version__ = "0.1.0"
