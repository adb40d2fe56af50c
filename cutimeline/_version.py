"""The package's version: a leaf every stage may import (the files they write
name it), apart from the root, which loads the stages."""

__version__ = "0.1.0"
