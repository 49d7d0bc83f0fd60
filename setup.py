"""Package discovery: `envs/`, `tools/`, `sandboxes/` install as subpackages of `agentrl`."""

from setuptools import find_packages, setup

_MAP = {
    "agentrl": "agentrl",
    "agentrl.envs": "envs",
    "agentrl.tools": "tools",
    "agentrl.sandboxes": "sandboxes",
    "agentrl.configs": "configs",
}


def _packages() -> list[str]:
    found = []
    for pkg, folder in _MAP.items():
        found.append(pkg)
        found += [f"{pkg}.{sub}" for sub in find_packages(folder)]
    return sorted(set(found))


setup(
    packages=_packages(),
    package_dir=_MAP,
    package_data={
        "": [
            "*.json",
            "*.jsonl",
            "*.tar.gz",
            "*.jinja",
            "*.txt",
            "*.yaml",
            "*.html",
            "*.js",
            "*.css",
        ]
    },
)
