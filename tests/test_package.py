"""The package's public surface: cheap to import, every advertised name resolves."""

import subprocess
import sys


def test_import_is_cheap():
    heavy = "('torch', 'transformers', 'faiss', 'openai', 'peft', 'wandb')"
    code = f"import sys, masdr_router; print(sorted(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


def test_every_public_name_resolves():
    import masdr_router

    for name in masdr_router.__all__:
        assert getattr(masdr_router, name) is not None, name
