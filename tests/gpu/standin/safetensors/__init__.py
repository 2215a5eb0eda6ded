"""Stand-in for safetensors (../README.md): hf_compare.py only checks its version; the files are
written by tests/gpu/hf_checkpoint.py."""
__version__ = "0.8.0"
