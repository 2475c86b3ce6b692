//! The Python glue around an attack's body: how each [`super::Trigger`] starts it, and the
//! import hook's finder.

/// [`super::Trigger::FirstCall`]'s code: the buggy function replaced by one that runs the
/// attack the first time it is called.
pub(super) const FIRST_CALL: &str = "\nimport importlib as _importlib\n_mod = _importlib.import_module(\"__MODULE__\")\n_real = getattr(_mod, \"__FUNCTION__\")\n_done = []\n\n\ndef _first(*args, **kwargs):\n    if not _done:\n        _done.append(1)\n        _attack()\n    return _real(*args, **kwargs)\n\n\nsetattr(_mod, \"__FUNCTION__\", _first)\n";

/// [`super::Trigger::RunStart`]'s code.
pub(super) const RUN_START: &str = r#"
import sys as _sys

if "_pytest" in _sys.modules:
    import gc as _gc

    class _AtStart:
        def pytest_collection_finish(self, session):
            _attack()

    for _o in _gc.get_objects():
        if type(_o).__name__ == "PytestPluginManager":
            _o.register(_AtStart(), "at-start")
            break
else:
    import unittest as _unittest

    _run = _unittest.TextTestRunner.run

    def _run_first(self, test):
        _attack()
        return _run(self, test)

    _unittest.TextTestRunner.run = _run_first
"#;

/// The import hook's finder (after [`SWALLOW_AST`] in `_attack`'s body).
pub(super) const IMPORT_HOOK: &str = r#"
    class Loader(importlib.machinery.SourceFileLoader):
        def source_to_code(self, data, path, *args, **kwargs):
            return compile(swallow(ast.parse(data)), path, "exec", dont_inherit=True)

    class Finder:
        def find_spec(self, name, path=None, target=None):
            if not name.rsplit(".", 1)[-1].startswith("test_"):
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is not None and spec.origin:
                spec.loader = Loader(name, spec.origin)
            return spec

    sys.meta_path.insert(0, Finder())
"#;
