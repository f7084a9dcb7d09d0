"""pe-bench: which positional encoding lets a small decoder trained at length L still model text at 2L, 4L, 8L?"""

__version__ = "0.1.0"
