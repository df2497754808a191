"""TensorDictBase's generic methods, one module per job; ``base.py`` attaches them to the class."""
