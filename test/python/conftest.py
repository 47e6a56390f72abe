"""Makes the model zoo (test/models/: families.py, zoo.py) importable by every test here, as the
benchmarks import it."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))
