"""Process settings: one frozen object, loaded at the edge (the CLI)."""

from gpuledger.config.settings import Settings, load_settings

__all__ = ["Settings", "load_settings"]
