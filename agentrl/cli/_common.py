"""What every subcommand shares: loading `--env-module` files as a usage error, not a crash.

A missing user file, or one Python cannot parse, is the user's typo, so it is a `ConfigError`
(one line naming file, line and column; exit code 2 from `agentrl.cli.main`), raised before
any model is loaded.
"""

from __future__ import annotations

from collections.abc import Iterable


def load_env_modules(paths: Iterable[str]) -> None:
    from agentrl.config import ConfigError
    from agentrl.envs import load_env_module

    for path in paths:
        try:
            load_env_module(path)
        except FileNotFoundError:
            raise ConfigError(f"--env-module {path}: no such file") from None
        except SyntaxError as e:
            raise ConfigError(f"--env-module {syntax_error_line(path, e)}") from None


def syntax_error_line(path: str, e: SyntaxError) -> str:
    """`FILE:LINE:COL: syntax error: MESSAGE` (`near: CODE`)."""
    code = (e.text or "").strip()
    near = f" (near: {code[:80]})" if code else ""
    return f"{path}:{e.lineno}:{e.offset}: syntax error: {e.msg}{near}"


ROWS_RECIPE = "configs/smollm2-rows-cpu.yaml"


def tiny_rows_warning(model_path: str, has_rows: bool) -> str | None:
    """One line when dataset rows are trained or sampled on a `tiny:` model: a random-init
    model of about a million parameters memorises rows and learns nothing that carries to
    held-out ones (0% -> 0%), which looks like a broken pipeline; the real-model recipe."""
    if not (has_rows and model_path.startswith("tiny:")):
        return None
    return (
        f"warning: dataset rows on {model_path}, a random-init test model (~1M parameters, no "
        f"pretraining): it memorises rows and will not learn to solve held-out ones; for a real "
        f"model see {ROWS_RECIPE} (model.path=smollm2-135m-instruct)"
    )
