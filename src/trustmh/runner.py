"""Kept so that scripts written against trustmh 0.1 (`from trustmh.runner import run, RunSpec`) keep
working; the engine lives in `trustmh.engine`."""

from .engine import *  # noqa: F401,F403
from .engine import __all__  # noqa: F401
from .engine.prepare import StoredSamples  # noqa: F401
from .engine.spec import versions  # noqa: F401
