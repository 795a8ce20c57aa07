"""The load generator's exceptions."""


class LoadError(Exception):
    """The load cannot run here; the message says why (no GPU, no PyTorch, kind unsupported, too little memory)."""
