"""The package's public surface: cheap to import, every advertised name resolves."""

import subprocess
import sys


def test_import_is_cheap():
    heavy = "('torch', 'transformers', 'faiss', 'openai', 'peft', 'wandb')"
    code = f"import sys, masdr_router; print(sorted(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


def test_every_public_name_resolves_to_the_package_object_of_that_name():
    import masdr_router

    for name in masdr_router.__all__:
        if name == "__version__":
            continue
        obj = getattr(masdr_router, name)
        assert obj.__name__ == name and obj.__module__.startswith("masdr_router."), (name, obj)
    from importlib.metadata import version

    assert masdr_router.__version__ == version("masdr-router")  # what pip installed is what the code says
