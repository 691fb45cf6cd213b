"""gpuledger: who used the GPU — an event-sourced attribution engine."""

__all__ = ["__version__"]
__version__ = "0.1.0"
