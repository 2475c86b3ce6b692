# dojo's test observer for unittest-style runners (`install_unittest` in dojo_observer.py, the
# file beside this one), then the environment's own sitecustomize, if it has one (this file
# shadows it on PYTHONPATH). The observer is loaded under another module name, so that pytest,
# where it runs, imports `dojo_observer` as its plugin afresh.
import os
import sys

_dojo_here = os.path.dirname(os.path.abspath(__file__))

try:
    import importlib.util

    _spec = importlib.util.spec_from_file_location(
        "_dojo_observer_unittest", os.path.join(_dojo_here, "dojo_observer.py")
    )
    _observer = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_observer)
    _observer.install_unittest()
except Exception:
    pass


def _dojo_chain():
    try:
        import importlib.machinery
        import importlib.util

        rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != _dojo_here]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
        if spec is None:
            return
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)
    except Exception:
        pass


_dojo_chain()
