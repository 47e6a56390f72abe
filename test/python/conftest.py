"""Makes the model zoo (test/models/: families.py, zoo.py) importable by every test here, as the
benchmarks import it, and turns oneDNN off on PyTorch 2.x (onednn_off.py)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))
import onednn_off  # noqa: E402,F401
